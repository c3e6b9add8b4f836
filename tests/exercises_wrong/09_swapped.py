# expect: branches_swapped
def signed_sqrt(x):
    return jax.lax.cond(x >= 0, lambda v: -jnp.sqrt(-v), lambda v: jnp.sqrt(v), x)
