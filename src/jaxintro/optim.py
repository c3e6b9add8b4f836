"""Optax recipes, built with `optax.chain` as the lesson shows."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp
import optax

from jaxintro.config import TrainConfig


def build_schedule(config: TrainConfig, total_steps: int, peak: Any = None) -> optax.Schedule:
    """The learning rate as a function of the step: constant, or linear warm-up then cosine decay.

    `peak` (default `config.lr`) may be a traced value: a sweep's learning rate is an input, not a constant.
    """
    if peak is not None:  # the schedule's shape at peak 1, scaled: optax's schedules test their peak in Python
        unit = build_schedule(dataclasses.replace(config, lr=1.0), total_steps)
        return lambda count: peak * unit(count)
    if config.schedule == "constant":
        return optax.constant_schedule(config.lr)
    warmup = min(config.warmup_steps, max(total_steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.lr, warmup_steps=warmup, decay_steps=max(total_steps, warmup + 1)
    )


def build_optimizer(config: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    """`chain(clip_by_global_norm?, adam | adamw | sgd)` with the config's schedule, in `optax.inject_hyperparams`.

    The learning rate, the weight decay and the clip norm are `optax.inject_hyperparams` inputs, kept in the
    optimizer state: arguments of the compiled program, not constants in it. A Python float would be baked into
    the program, so a new `--lr` would compile the whole epoch again; as an input it reuses the program the
    compile cache holds, and in a sweep each member carries its own values through one program.
    """
    return optax.inject_hyperparams(_factory(config, total_steps))(**hyperparams(config))


def init_with_inputs(config: TrainConfig) -> Callable[[Any, dict[str, Any]], Any]:
    """`(params, values) -> build_optimizer(config, ...).init(params)`, the hyperparameters' values (`hyperparams`)
    an input: the layouts jit it into one small program.

    Op by op, each of the state's ops was a program of its own, each loaded from the persistent cache (0.14-0.26 s
    on a CPU, 0.02-0.04 s as one program); with the values as constants of the program, a new `--lr` would compile
    it again. The state does not depend on the schedule's length (an update reads the schedule, `init` never does),
    so one program serves every `--epochs` too.
    """
    def init(params: Any, values: dict[str, Any]) -> Any:
        return optax.inject_hyperparams(_factory(config, total_steps=1))(**values).init(params)

    return init


def _factory(config: TrainConfig, total_steps: int) -> Callable[..., optax.GradientTransformation]:
    """The optimizer as a function of the hyperparameters `optax.inject_hyperparams` feeds it."""
    def chain(learning_rate, weight_decay, max_norm=config.clip_norm):
        return _chain(config, total_steps, learning_rate, weight_decay, max_norm)

    return chain


def hyperparams(config: TrainConfig) -> dict[str, float]:
    """The optimizer's inputs a run sets (`build_optimizer`): a new value reuses the compiled program. A sweep's
    clip norm stays a constant: its checkpoints hold these inputs as saved, and those of earlier versions have
    none for it."""
    values = {"learning_rate": config.lr, "weight_decay": config.weight_decay}
    return values if config.clip_norm is None or config.sweep else {**values, "max_norm": config.clip_norm}


def wrap_inner_state(config: TrainConfig, template: Any, inner: Any) -> Any:
    """The state `build_optimizer`'s optimizer keeps, around the wrapped optimizer's own (`inner`, what a checkpoint
    of a run that is not a sweep holds, the format it always had): the config's hyperparameters set again, in
    `template`'s shapes (a leading member axis for several seeds). Its `count` starts again at 0: it counts the
    updates since the wrapper was made, and no hyperparameter here is scheduled by it (the learning rate's
    schedule reads the inner optimizer's own count, restored)."""
    values = hyperparams(config)
    return template._replace(
        count=jnp.zeros(template.count.shape, template.count.dtype),
        hyperparams={name: jnp.full(leaf.shape, values[name], leaf.dtype) for name, leaf in template.hyperparams.items()},
        inner_state=inner)


def with_hyperparams(opt_state: Any, lr: Any, weight_decay: Any) -> Any:
    """A sweep member's optimizer state carrying its own learning rate and weight decay."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": lr, "weight_decay": weight_decay})


# Each optimizer from its learning rate (a number or a schedule) and weight decay: one row per `--optimizer`
# (`config.DECAYS_WEIGHTS` says which of them use the weight decay).
OPTIMIZERS = {
    "adam": lambda learning_rate, weight_decay: optax.adam(learning_rate),
    "adamw": lambda learning_rate, weight_decay: optax.adamw(learning_rate, weight_decay=weight_decay),
    "sgd": lambda learning_rate, weight_decay: optax.sgd(learning_rate),
}


def _chain(config: TrainConfig, total_steps: int, lr: Any, weight_decay: Any,
           max_norm: Any = None) -> optax.GradientTransformation:
    # A constant rate goes in as it is: `optax.adam(learning_rate)`, the lesson's `optax.adam(1e-3)` with its number
    # an input.
    schedule = lr if config.schedule == "constant" else build_schedule(config, total_steps, peak=lr)
    base = OPTIMIZERS[config.optimizer](schedule, weight_decay)
    if max_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(max_norm), base)
