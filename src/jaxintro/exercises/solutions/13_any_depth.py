"""Exercise 3: an MLP forward pass of any depth, from jax.tree.leaves."""

import jax
import jax.numpy as jnp


def mlp_forward(params: dict, x: jax.Array) -> jax.Array:
    """Logits of an MLP with any number of layers {"layer1": {"w", "b"}, ..., "layerN"}: ReLU between layers."""
    # >>> solution
    leaves = jax.tree.leaves(params)  # b1, w1, b2, w2, ...: keys sorted, so "b" before "w" (up to layer9)
    layers = list(zip(leaves[1::2], leaves[0::2]))  # [(w1, b1), (w2, b2), ...]
    for w, b in layers[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = layers[-1]
    return x @ w + b  # no ReLU on the logits
    # <<<
