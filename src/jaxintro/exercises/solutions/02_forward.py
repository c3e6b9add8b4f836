"""Build it, step 2: the forward pass of the 3-layer MLP."""

import jax
import jax.numpy as jnp


def init_params(key: jax.Array, sizes: tuple[int, ...] = (784, 256, 128, 10)) -> dict:
    """Step 1, given: He-normal weights, zero biases."""
    keys = jax.random.split(key, len(sizes) - 1)
    params = {}
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params


def forward(params: dict, x: jax.Array) -> jax.Array:
    """Logits (batch, classes): ReLU after layers 1 and 2, nothing after layer 3."""
    # >>> solution
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]  # logits: no ReLU, the loss wants any real number
    # <<<
