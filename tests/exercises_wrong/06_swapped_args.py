# expect: arguments_swapped
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p - lr * g, grads, params)  # f is called as f(grad leaf, param leaf)
