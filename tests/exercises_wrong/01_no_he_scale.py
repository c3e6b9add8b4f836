# expect: missing_he_scale
def init_params(key, sizes=(784, 256, 128, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        params[f"layer{i + 1}"] = {"w": jax.random.normal(k, (fan_in, fan_out)), "b": jnp.zeros(fan_out)}
    return params
