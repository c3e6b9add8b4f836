# expect: key_reused
def init_params(key, sizes):
    keys = jax.random.split(key, 3)
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(keys[i % 3], (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
