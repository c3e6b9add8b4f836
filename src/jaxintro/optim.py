"""Optax recipes, built with `optax.chain` as the lesson shows."""

from __future__ import annotations

import dataclasses
from typing import Any

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
    """`chain(clip_by_global_norm?, adam | adamw | sgd)` with the config's schedule.

    In a sweep the learning rate and weight decay are `optax.inject_hyperparams` inputs, kept in the
    optimizer state: each member carries its own values, and one compiled program trains them all.
    (A Python float would be baked into the program as a constant, one compilation per value.)
    """
    if config.sweep:
        def chain(learning_rate, weight_decay):
            return _chain(config, total_steps, learning_rate, weight_decay)

        return optax.inject_hyperparams(chain)(learning_rate=config.lr, weight_decay=config.weight_decay)
    return _chain(config, total_steps, config.lr, config.weight_decay)


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


def _chain(config: TrainConfig, total_steps: int, lr: Any, weight_decay: Any) -> optax.GradientTransformation:
    # A constant rate is passed as a number, exactly `optax.adam(1e-3)` as in the lesson.
    schedule = lr if config.schedule == "constant" else build_schedule(config, total_steps, peak=lr)
    base = OPTIMIZERS[config.optimizer](schedule, weight_decay)
    if config.clip_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), base)
