# expect: ignores_key
def init_params(key, sizes):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        k = jax.random.split(key)[0] if i == 0 else jax.random.key(100 + i)  # only the first layer from the key
        params[f"layer{i + 1}"] = {"w": jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
                                   "b": jnp.zeros(fan_out)}
    return params
