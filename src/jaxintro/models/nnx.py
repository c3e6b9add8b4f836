"""The MLP in Flax NNX, Flax's current API; trained through `nnx.split`/`nnx.merge` in the shared scan."""

from __future__ import annotations

from typing import Callable

import jax
from flax import nnx

from jaxintro.models.base import HE_NORMAL, LESSON_ACTIVATION, Model, activation_named


class MLP(nnx.Module):
    """Linear -> ReLU (or `activation`) (-> Dropout) for each hidden width, then a Linear to the classes."""

    def __init__(self, sizes: tuple[int, ...], dropout: float, *, rngs: nnx.Rngs,
                 activation: Callable[[jax.Array], jax.Array] = nnx.relu):
        self.layers = nnx.List(
            [nnx.Linear(i, o, kernel_init=HE_NORMAL, rngs=rngs) for i, o in zip(sizes[:-1], sizes[1:])]
        )
        self.dropout = nnx.Dropout(dropout) if dropout > 0.0 else None
        self.activation = activation  # a function, not an array: part of the graph definition

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
            if self.dropout is not None and rngs is not None:
                x = self.dropout(x, deterministic=False, rngs=rngs)
        return self.layers[-1](x)


def build(sizes: tuple[int, ...], *, dropout: float = 0.0, activation: str = LESSON_ACTIVATION) -> Model:
    """The NNX style as a `Model`: the params are the module's `nnx.Param` state."""
    function = activation_named(activation)
    # The graph definition holds no arrays: build it once from an abstract module.
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: MLP(sizes, dropout, rngs=nnx.Rngs(0), activation=function)))

    def init(key: jax.Array) -> nnx.State:
        return nnx.state(MLP(sizes, dropout, rngs=nnx.Rngs(params=key), activation=function))

    def apply(params: nnx.State, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        model = nnx.merge(graphdef, params)
        return model(x, rngs=None if key is None else nnx.Rngs(dropout=key))

    return Model("nnx", sizes, init, apply)
