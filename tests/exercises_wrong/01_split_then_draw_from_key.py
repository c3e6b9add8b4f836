# expect: key_reused
def init_params(key, sizes):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, subkey = jax.random.split(key)
        w = jax.random.normal(key, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)  # key is split again next layer
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
