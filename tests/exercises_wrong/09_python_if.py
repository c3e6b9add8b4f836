# expect: python_if_on_traced
def signed_sqrt(x):
    if x >= 0:  # a Python `if` on a traced value
        return jnp.sqrt(x)
    return -jnp.sqrt(-x)
