# expect: ignores_key
GLOBAL_KEY = jax.random.PRNGKey(0)


def noisy_copies(key, x, n):
    return x[None] + jax.random.normal(GLOBAL_KEY, (n,) + x.shape)  # the key it is given is never read
