# expect: copy_without_noise
def noisy_copies(key, x, n):
    keys = jax.random.split(key, n - 1)
    noisy = [x + jax.random.normal(k, x.shape) for k in keys]
    return jnp.stack([x] + noisy)  # copy 0 is x itself
