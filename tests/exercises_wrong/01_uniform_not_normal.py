# expect: not_normal
def init_params(key, sizes=(784, 256, 128, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    return {f"layer{i + 1}": {"w": jax.random.uniform(k, (a, b), minval=-1.0, maxval=1.0) * jnp.sqrt(2.0 / a),
                              "b": jnp.zeros(b)}  # uniform: another shape, and another spread
            for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:]))}
