# expect: number_from_traced
def signed_sqrt(x):
    if float(x) >= 0:
        return jnp.sqrt(x)
    return -jnp.sqrt(-x)
