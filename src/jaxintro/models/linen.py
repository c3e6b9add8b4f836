"""The MLP in Flax Linen, used as the lesson shows: `model.init(key, x)`, `model.apply(params, x)`."""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxintro.models.base import HE_NORMAL, LESSON_ACTIVATION, Model, activation_named


class MLP(nn.Module):
    """Dense -> ReLU (or `activation`) (-> Dropout) for each hidden width, then a Dense to the classes."""

    hidden: Sequence[int]
    num_classes: int
    dropout: float = 0.0
    activation: Callable[[jax.Array], jax.Array] = nn.relu

    @nn.compact
    def __call__(self, x: jax.Array, *, deterministic: bool = True) -> jax.Array:
        for width in self.hidden:
            x = self.activation(nn.Dense(width, kernel_init=HE_NORMAL)(x))
            if self.dropout > 0.0:
                x = nn.Dropout(self.dropout, deterministic=deterministic)(x)
        return nn.Dense(self.num_classes, kernel_init=HE_NORMAL)(x)


def build(sizes: tuple[int, ...], *, dropout: float = 0.0, activation: str = LESSON_ACTIVATION) -> Model:
    """The Linen style as a `Model`; its params are Linen's `{"Dense_0": {"kernel", "bias"}, ...}`."""
    module = MLP(hidden=tuple(sizes[1:-1]), num_classes=sizes[-1], dropout=dropout,
                 activation=activation_named(activation))

    def init(key: jax.Array):
        return module.init(key, jnp.zeros((1, sizes[0]), jnp.float32))["params"]

    def apply(params, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        if key is None:
            return module.apply({"params": params}, x)
        return module.apply({"params": params}, x, deterministic=False, rngs={"dropout": key})

    return Model("linen", sizes, init, apply)
