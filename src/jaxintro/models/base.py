"""The contract every model style meets, and what the styles share: `Model`, the He init, the activations,
`param_count`.

Below the styles and `jaxintro.models` itself, so that each style can import it without a cycle.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxintro.errors import ConfigError
from jaxintro.i18n import _

Params = Any  # a pytree of arrays

# What a model runs between its layers, by name; the lesson's MLP runs ReLU. Every style takes its function from here
# (`activation_named`), and code that works layer by layer reads it from the model's `Dense`: a new one is a row here.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"relu": jax.nn.relu}
LESSON_ACTIVATION = "relu"


def untruncated_he_normal(in_axis: int = -2) -> Callable[..., jax.Array]:
    """He (Kaiming) normal, N(0, 2 / fan_in), fan_in the size of `in_axis`: `random.normal(key, shape) * std`."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        std = jnp.sqrt(jnp.asarray(2.0 / shape[in_axis], dtype))
        # `random.normal` returns sqrt(2) * erfinv(u); under jit XLA rewrites (sqrt(2) * e) * std as e * (sqrt(2) *
        # std), one rounding for two, and half the weights would land an ulp from the same key's draw outside jit.
        # The barrier keeps the two products apart (op by op it is the identity).
        return jax.lax.optimization_barrier(jax.random.normal(key, shape, dtype)) * std

    return init


# The lesson's init for ReLU layers, shared by every style so that they start from the same weights. A kernel is
# (fan_in, fan_out); Equinox stores (fan_out, fan_in). (Flax's and JAX's own `he_normal` are truncated: the styles
# would differ.)
HE_NORMAL = untruncated_he_normal(in_axis=-2)
HE_NORMAL_OUT_IN = untruncated_he_normal(in_axis=-1)


class Model(NamedTuple):
    """A model as pure functions: `init(key)` and `apply(params, x, key)`.

    A style that describes its layers (`dense`) lets code that works layer by layer (the fast per-example norms, the
    PyTorch twin) read the model's own math instead of writing it again; without one they use `apply` alone.
    """

    name: str
    sizes: tuple[int, ...]
    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array, jax.Array | None], jax.Array]
    dense: "Dense | None" = None


class Dense(NamedTuple):
    """A stack of dense layers: `layers(params)` gives each layer's (w (fan_in, fan_out), b) in forward order, and
    `activation` runs between them (not after the last)."""

    layers: Callable[[Params], list[tuple[jax.Array, jax.Array]]]
    activation: Callable[[jax.Array], jax.Array]


def param_count(params: Params) -> int:
    """Total number of scalars in a parameter pytree."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(params))


def activation_named(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation called `name` in `ACTIVATIONS`, or a ConfigError naming the known ones."""
    if name not in ACTIVATIONS:
        raise ConfigError(_("there is no activation {name!r}: the models know {known}").format(
            name=name, known=", ".join(ACTIVATIONS)))
    return ACTIVATIONS[name]
