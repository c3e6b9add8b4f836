# expect: cond_missing
def signed_sqrt(x):
    return jnp.sign(x) * jnp.sqrt(jnp.abs(x))
