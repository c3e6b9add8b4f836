# expect: key_reused
def noisy_copies(key, x, n):
    keys = jax.random.split(key, 2)
    return jnp.stack([x + jax.random.normal(keys[i % 2], x.shape) for i in range(n)])  # copies repeat from 2 on
