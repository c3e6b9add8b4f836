# expect: update_not_params
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: -lr * g, params, grads)
