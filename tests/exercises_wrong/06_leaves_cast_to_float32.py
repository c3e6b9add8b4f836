# expect: dtype_changed
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: (p - lr * g).astype("float32"), params, grads)
