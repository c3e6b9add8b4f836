# expect: key_reused
def noisy_copies(key, x, n):
    return jnp.stack([x + jax.random.normal(key, x.shape) for _ in range(n)])
