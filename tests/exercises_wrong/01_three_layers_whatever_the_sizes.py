# expect: shape
def init_params(key, sizes):
    keys = jax.random.split(key, 3)  # the lesson's three layers: zip stops at the third
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        params[f"layer{i + 1}"] = {"w": jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
                                   "b": jnp.zeros(fan_out)}
    return params
