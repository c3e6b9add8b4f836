"""The lesson's MLP in pure JAX: parameters are a dict of layers, the forward pass any depth."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxintro.config import LESSON_SIZES
from jaxintro.models.base import HE_NORMAL, LESSON_ACTIVATION, Dense, Model, activation_named

Layer = dict[str, Array]  # {"w": (fan_in, fan_out), "b": (fan_out,)}
Params = dict[str, Layer]  # {"layer1": ..., "layer2": ..., ...}


def he_normal(key: jax.Array, fan_in: int, fan_out: int) -> Float[Array, "fan_in fan_out"]:
    """He (Kaiming) normal init: N(0, 2 / fan_in), suited to ReLU (the lesson's `random.normal * sqrt(2 / fan_in)`)."""
    return HE_NORMAL(key, (fan_in, fan_out), jnp.float32)


def init_params(key: jax.Array, sizes: tuple[int, ...] = LESSON_SIZES) -> Params:
    """He-initialised weights and zero biases, one key split off per layer (three for the lesson's model)."""
    keys = jax.random.split(key, len(sizes) - 1)
    return {
        f"layer{i + 1}": {"w": he_normal(k, fan_in, fan_out), "b": jnp.zeros((fan_out,), jnp.float32)}
        for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:]))
    }


def layer_names(params: Params) -> list[str]:
    """Layer keys in forward order; numeric, so `layer10` comes after `layer2` (unlike `jax.tree.leaves`)."""
    return sorted(params, key=lambda name: int(name.removeprefix("layer")))


def mlp_forward(
    params: Params,
    x: Float[Array, "batch features"],
    *,
    dropout: float = 0.0,
    key: jax.Array | None = None,
    activation: Callable[[Array], Array] = jax.nn.relu,
) -> Float[Array, "batch classes"]:
    """Logits of an MLP of any depth: ReLU (or `activation`) between layers, inverted dropout after each hidden
    activation when `key` is given."""
    names = layer_names(params)
    use_dropout = dropout > 0.0 and key is not None
    keys = jax.random.split(key, len(names)) if use_dropout else [None] * len(names)
    for name, layer_key in zip(names[:-1], keys):
        x = activation(x @ params[name]["w"] + params[name]["b"])
        if use_dropout:
            keep = jax.random.bernoulli(layer_key, 1.0 - dropout, x.shape)
            x = jnp.where(keep, x / (1.0 - dropout), 0.0)
    last = params[names[-1]]
    return x @ last["w"] + last["b"]


def build(sizes: tuple[int, ...], *, dropout: float = 0.0, activation: str = LESSON_ACTIVATION) -> Model:
    """The pure-JAX style as a `Model`."""
    function = activation_named(activation)

    def apply(params: Params, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        return mlp_forward(params, x, dropout=dropout, key=key, activation=function)

    return Model("jax", sizes, lambda key: init_params(key, sizes), apply, Dense(dense_layers, function))


def dense_layers(params: Params) -> list[tuple[Array, Array]]:
    """Each layer's (w, b), in forward order."""
    return [(params[name]["w"], params[name]["b"]) for name in layer_names(params)]
