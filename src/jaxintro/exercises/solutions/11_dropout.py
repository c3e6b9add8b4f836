"""Exercise 1: dropout in the MLP, with a key split per layer."""

import jax
import jax.numpy as jnp


def forward(params: dict, x: jax.Array, *, key: jax.Array | None = None, rate: float = 0.5) -> jax.Array:
    """Logits of the 3-layer MLP; with a key, inverted dropout (keep 1 - rate, scale by 1 / (1 - rate))
    after each hidden ReLU, a new key for each layer; without a key, no dropout."""
    # >>> solution
    keys = jax.random.split(key, 2) if key is not None else [None, None]  # one key per hidden layer
    h = x
    for name, layer_key in zip(["layer1", "layer2"], keys):
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
        if layer_key is not None:  # a Python `if` on a Python value (None or not): fine under jit
            keep = jax.random.bernoulli(layer_key, 1.0 - rate, h.shape)
            h = jnp.where(keep, h / (1.0 - rate), 0.0)  # scaled so the expected activation is unchanged
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
    # <<<
