# expect: norm_squared
def grad_norms(grads):
    return sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads))
