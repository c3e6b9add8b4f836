# expect: branch_sqrt_of_negative
def signed_sqrt(x):
    return jax.lax.cond(x >= 0, jnp.sqrt, lambda v: -jnp.sqrt(v), x)  # the negative branch forgot to negate v
