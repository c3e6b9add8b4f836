# expect: parent_key_used
def noisy_copies(key, x, n):
    return x + jax.random.normal(key, (n, *x.shape))  # one draw with the key: nothing was split
