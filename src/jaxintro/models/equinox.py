"""The MLP in Equinox: the model is a pytree, a layer sees one example, `jax.vmap` batches it."""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxintro.models.base import HE_NORMAL_OUT_IN, LESSON_ACTIVATION, Model, activation_named


class MLP(eqx.Module):
    """The lesson's MLP with exact widths (`eqx.nn.MLP(width_size=256, depth=2)` would give 784-256-256-10)."""

    layers: list[eqx.nn.Linear]
    dropout: eqx.nn.Dropout
    activation: Callable[[jax.Array], jax.Array] = eqx.field(static=True)

    def __init__(self, sizes: tuple[int, ...], dropout: float = 0.0, *, key: jax.Array,
                 activation: Callable[[jax.Array], jax.Array] = jax.nn.relu):
        keys = jax.random.split(key, len(sizes) - 1)
        layers = []
        for k, fan_in, fan_out in zip(keys, sizes[:-1], sizes[1:]):
            linear = eqx.nn.Linear(fan_in, fan_out, key=k)
            # Equinox's default is uniform; use He normal like every other style.
            weight = HE_NORMAL_OUT_IN(k, (fan_out, fan_in), jnp.float32)
            linear = eqx.tree_at(lambda l: (l.weight, l.bias), linear, (weight, jnp.zeros((fan_out,), jnp.float32)))
            layers.append(linear)
        self.layers = layers
        self.dropout = eqx.nn.Dropout(dropout)
        self.activation = activation

    def __call__(self, x: Float[Array, " features"], *, key: jax.Array | None = None) -> Float[Array, " classes"]:
        keys = jax.random.split(key, len(self.layers)) if key is not None else [None] * len(self.layers)
        for layer, k in zip(self.layers[:-1], keys):
            x = self.activation(layer(x))
            if self.dropout.p > 0.0 and k is not None:
                x = self.dropout(x, key=k, inference=False)
        return self.layers[-1](x)


def build(sizes: tuple[int, ...], *, dropout: float = 0.0, activation: str = LESSON_ACTIVATION) -> Model:
    """The Equinox style as a `Model`: params are the model's arrays (`eqx.partition`), the rest is static."""
    function = activation_named(activation)
    # The static part (layer shapes, activation) holds no arrays: take it from an abstract model.
    abstract = eqx.filter_eval_shape(lambda: MLP(sizes, dropout, key=jax.random.key(0), activation=function))
    _, static = eqx.partition(abstract, lambda leaf: isinstance(leaf, jax.ShapeDtypeStruct))

    def init(key: jax.Array):
        params, _ = eqx.partition(MLP(sizes, dropout, key=key, activation=function), eqx.is_array)
        return params

    def apply(params, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        model = eqx.combine(params, static)
        if key is None:
            return jax.vmap(model)(x)
        return jax.vmap(lambda xi, ki: model(xi, key=ki))(x, jax.random.split(key, x.shape[0]))

    return Model("equinox", sizes, init, apply)
