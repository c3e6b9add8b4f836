# expect: not_normal
def noisy_copies(key, x, n):
    keys = jax.random.split(key, n)
    return jax.vmap(lambda k: x + jax.random.uniform(k, x.shape, minval=-3 ** 0.5, maxval=3 ** 0.5))(keys)
