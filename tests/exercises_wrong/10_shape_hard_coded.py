# expect: raised
def noisy_copies(key, x, n):
    keys = jax.random.split(key, n)
    return jax.vmap(lambda k: x + jax.random.normal(k, (128,)))(keys)  # the shape one example uses
