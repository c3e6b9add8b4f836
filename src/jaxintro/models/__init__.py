"""One model, four ways. Each style builds the same MLP and exposes it as a `Model`.

A `Model` is two pure functions over a pytree of parameters, so one training loop
(`jaxintro.train`) compiles every style the same way:

- `init(key) -> params`
- `apply(params, x_BxD, key) -> logits_BxC`; `key=None` means evaluation (no dropout).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from jaxintro.config import MODELS
from jaxintro.errors import ConfigError

Params = Any  # a pytree of arrays

# He (Kaiming) normal, N(0, 2 / fan_in), the lesson's init for ReLU layers, shared by every style so that
# they start from the same distribution. A kernel is (fan_in, fan_out); Equinox stores (fan_out, fan_in).
# (Flax's own `he_normal` is truncated, which would make the styles differ.)
HE_NORMAL = jax.nn.initializers.variance_scaling(2.0, "fan_in", "normal")
HE_NORMAL_OUT_IN = jax.nn.initializers.variance_scaling(2.0, "fan_in", "normal", in_axis=-1, out_axis=-2)


class Model(NamedTuple):
    """A model as pure functions: `init(key)` and `apply(params, x, key)`."""

    name: str
    sizes: tuple[int, ...]
    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array, jax.Array | None], jax.Array]


def build_model(
    style: str, in_dim: int, hidden: tuple[int, ...], num_classes: int, *, dropout: float = 0.0
) -> Model:
    """Build the MLP `in_dim -> hidden... -> num_classes` in `style` (jax, linen, nnx or equinox)."""
    sizes = (in_dim, *hidden, num_classes)
    if style == "jax":
        from jaxintro.models import mlp as module
    elif style == "linen":
        from jaxintro.models import linen as module  # type: ignore[no-redef]
    elif style == "nnx":
        from jaxintro.models import nnx as module  # type: ignore[no-redef]
    elif style == "equinox":
        from jaxintro.models import equinox as module  # type: ignore[no-redef]
    else:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)}; got {style!r}")
    return module.build(sizes, dropout=dropout)


def model_for(config: Any, features: int, classes: int) -> Model:
    """The model a run's config describes for data of `features` inputs and `classes` outputs (the one rule)."""
    return build_model(config.model, features, config.hidden, classes, dropout=config.dropout)


def param_count(params: Params) -> int:
    """Total number of scalars in a parameter pytree."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(params))
