# expect: lr_ignored
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)  # a rate written into the code
