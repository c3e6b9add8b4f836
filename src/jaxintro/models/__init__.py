"""One model, four ways. Each style builds the same MLP and exposes it as a `Model`.

A `Model` is two pure functions over a pytree of parameters, so one training loop
(`jaxintro.train`) compiles every style the same way:

- `init(key) -> params`
- `apply(params, x_BxD, key) -> logits_BxC`; `key=None` means evaluation (no dropout).
"""

from __future__ import annotations

import functools
from typing import Any

from jaxintro.config import MODELS
from jaxintro.errors import ConfigError
from jaxintro.models import mlp
from jaxintro.models.base import HE_NORMAL, HE_NORMAL_OUT_IN, Dense, Model, Params, param_count

__all__ = ["HE_NORMAL", "HE_NORMAL_OUT_IN", "Dense", "Model", "Params", "build_model", "model_for", "param_count"]


def build_model(style: str, in_dim: int, hidden: tuple[int, ...], num_classes: int, **options: Any) -> Model:
    """Build the MLP `in_dim -> hidden... -> num_classes` in `style` (jax, linen, nnx or equinox), with the options
    the style takes (`config.MODEL_OPTIONS`: every style takes `dropout`)."""
    sizes = (in_dim, *hidden, num_classes)
    # The pure-JAX style loads with the package; the others load Flax or Equinox only when chosen.
    if style == "jax":
        module = mlp
    elif style == "linen":
        from jaxintro.models import linen as module  # type: ignore[no-redef]
    elif style == "nnx":
        from jaxintro.models import nnx as module  # type: ignore[no-redef]
    elif style == "equinox":
        from jaxintro.models import equinox as module  # type: ignore[no-redef]
    else:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)}; got {style!r}")
    return module.build(sizes, **options)


def model_for(config: Any, features: int, classes: int) -> Model:
    """The model a run's config describes for data of `features` inputs and `classes` outputs (the one rule).

    The same description gives the same `Model` in a process, so what is jitted per model (the initial weights'
    draw, `layout.jitted_draw`) compiles once however many runs the process makes (tests, notebooks).
    """
    options = tuple(sorted(config.model_options.items()))
    return _described(config.model, features, tuple(config.hidden), classes, options)


@functools.cache
def _described(style: str, features: int, hidden: tuple[int, ...], classes: int,
               options: tuple[tuple[str, Any], ...]) -> Model:
    return build_model(style, features, hidden, classes, **dict(options))
