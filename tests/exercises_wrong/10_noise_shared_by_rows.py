# expect: noise_shared
def noisy_copies(key, x, n):
    keys = jax.random.split(key, n)
    return jnp.stack([x + jax.random.normal(k, x.shape[-1:]) for k in keys])  # one row of noise for every row
