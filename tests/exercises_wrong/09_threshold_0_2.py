# expect: condition_not_at_zero
def signed_sqrt(x):
    return jax.lax.cond(x > 0.2, jnp.sqrt, lambda v: -jnp.sqrt(-v), x)
