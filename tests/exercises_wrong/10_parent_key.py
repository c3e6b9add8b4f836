# expect: parent_key_used
def noisy_copies(key, x, n):
    keys = [key, *jax.random.split(key, n - 1)]  # the first copy uses the key that was split
    return jnp.stack([x + jax.random.normal(k, x.shape) for k in keys])
