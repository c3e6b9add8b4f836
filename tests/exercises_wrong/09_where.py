# expect: nan_gradient
def signed_sqrt(x):
    return jnp.where(x >= 0, jnp.sqrt(x), -jnp.sqrt(-x))  # both branches computed
