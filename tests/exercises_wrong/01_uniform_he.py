# expect: not_normal
def init_params(key, sizes=(784, 256, 128, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        lim = jnp.sqrt(6.0 / fan_in)
        params[f"layer{i + 1}"] = {"w": jax.random.uniform(k, (fan_in, fan_out), minval=-lim, maxval=lim),
                                   "b": jnp.zeros(fan_out)}
    return params
