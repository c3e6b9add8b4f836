# expect: ignores_key
import numpy as np


def init_params(key, sizes=(784, 256, 128, 10)):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = np.random.randn(fan_in, fan_out) * np.sqrt(2.0 / fan_in)
        params[f"layer{i + 1}"] = {"w": jnp.asarray(w), "b": jnp.zeros(fan_out)}
    return params
