# expect: dtype_changed
def signed_sqrt(x):
    x = x.astype(jnp.float32)  # "to be safe"
    return jax.lax.cond(x >= 0, jnp.sqrt, lambda v: -jnp.sqrt(-v), x)
