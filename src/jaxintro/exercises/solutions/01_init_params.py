"""Build it, step 1: the MLP's parameters, He-initialised from split keys."""

import jax
import jax.numpy as jnp


def init_params(key: jax.Array, sizes: tuple[int, ...] = (784, 256, 128, 10)) -> dict:
    """{"layer1": {"w": (fan_in, fan_out), "b": (fan_out,)}, ...}: He-normal weights, zero biases."""
    # >>> solution
    keys = jax.random.split(key, len(sizes) - 1)  # one key per layer: a key is used once
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)  # He init keeps ReLU signals alive
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
    # <<<
