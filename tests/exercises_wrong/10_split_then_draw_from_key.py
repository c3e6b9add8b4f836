# expect: key_reused
def noisy_copies(key, x, n):
    copies = []
    for _ in range(n):
        key, subkey = jax.random.split(key)
        copies.append(x + jax.random.normal(key, x.shape))  # key is split again for the next copy
    return jnp.stack(copies)
