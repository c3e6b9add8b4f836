# expect: mismatch
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: (p - lr * g).reshape(-1)[:1], params, grads)  # one entry a leaf, not the leaf
