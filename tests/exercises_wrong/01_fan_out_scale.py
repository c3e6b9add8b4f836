# expect: wrong_scale
def init_params(key, sizes=(784, 256, 128, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    return {f"layer{i + 1}": {"w": jax.random.normal(k, (a, b)) * jnp.sqrt(2.0 / b), "b": jnp.zeros(b)}
            for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:]))}
