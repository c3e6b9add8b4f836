# expect: tiny_values_off
def signed_sqrt(x):
    return jax.lax.cond(x >= 0, lambda v: jnp.sqrt(v + 1e-8), lambda v: -jnp.sqrt(-v + 1e-8), x)  # "against NaN"
