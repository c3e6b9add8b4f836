# expect: zero_weights
def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2 // fan_in)  # floor division: 0
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
