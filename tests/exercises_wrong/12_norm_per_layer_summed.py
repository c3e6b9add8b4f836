# expect: norm_not_global
def grad_norms(grads):
    return sum(jnp.linalg.norm(g.reshape(g.shape[0], -1), axis=1) for g in jax.tree.leaves(grads))
