# expect: tiny_norms_off
def grad_norms(grads):
    squares = [jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads)]
    return jnp.sqrt(sum(squares) + 1e-6)  # "against NaN"
