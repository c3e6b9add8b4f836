# expect: no_tails
def noisy_copies(key, x, n):
    keys = jax.random.split(key, n)
    return jnp.stack([x + jax.random.truncated_normal(k, -3.0, 3.0, x.shape) for k in keys])  # no tails past 3
