# expect: lost_sign
def signed_sqrt(x):
    return jnp.sqrt(jnp.abs(x))
