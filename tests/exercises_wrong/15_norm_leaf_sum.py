# expect: norm_not_global
def global_norm(grads):
    return sum(jnp.linalg.norm(g) for g in jax.tree.leaves(grads))
