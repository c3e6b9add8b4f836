# expect: key_reused
def init_params(key, sizes=(784, 256, 128, 10)):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(key, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)  # the same key, every layer
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
