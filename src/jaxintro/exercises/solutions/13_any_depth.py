"""Exercise 3: an MLP forward pass of any depth: count the layers with jax.tree.leaves, walk them by number."""

import jax
import jax.numpy as jnp


def mlp_forward(params: dict, x: jax.Array) -> jax.Array:
    """Logits of an MLP with any number of layers {"layer1": {"w", "b"}, ..., "layerN"}: ReLU between layers."""
    # >>> solution
    n = len(jax.tree.leaves(params)) // 2  # two leaves per layer, w and b
    # By number, not in the leaves' order: jax.tree.leaves sorts the keys as strings, "layer10" before "layer2".
    for i in range(1, n):
        layer = params[f"layer{i}"]
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    last = params[f"layer{n}"]
    return x @ last["w"] + last["b"]  # no ReLU on the logits
    # <<<
