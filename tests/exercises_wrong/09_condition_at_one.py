# expect: condition_not_at_zero
def signed_sqrt(x):
    return jax.lax.cond(x >= 1, lambda v: jnp.sqrt(v), lambda v: -jnp.sqrt(-v), x)  # 0 < x < 1 takes the wrong branch
