# expect: wrong_sign
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p + lr * g, params, grads)
