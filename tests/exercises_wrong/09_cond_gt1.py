# expect: condition_not_at_zero
def signed_sqrt(x):
    return jax.lax.cond(x >= 0.25, lambda v: jnp.sqrt(v), lambda v: -jnp.sqrt(jnp.abs(v)), x)
