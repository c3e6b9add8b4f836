# expect: ignores_key
def noisy_copies(key, x, n):
    keys = jax.random.split(jax.random.key(42), n)
    return jax.vmap(lambda k: x + jax.random.normal(k, x.shape))(keys)
