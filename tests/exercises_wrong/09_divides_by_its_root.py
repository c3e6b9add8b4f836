# expect: zero_over_zero
def signed_sqrt(x):
    return jax.lax.cond(x >= 0, lambda v: v / jnp.sqrt(v), lambda v: v / jnp.sqrt(-v), x)
