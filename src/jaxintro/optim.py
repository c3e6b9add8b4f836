"""Optax recipes, built with `optax.chain` as the lesson shows."""

from __future__ import annotations

import optax

from jaxintro.config import TrainConfig


def build_schedule(config: TrainConfig, total_steps: int) -> optax.Schedule:
    """The learning rate as a function of the step: constant, or linear warm-up then cosine decay."""
    if config.schedule == "constant":
        return optax.constant_schedule(config.lr)
    warmup = min(config.warmup_steps, max(total_steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.lr, warmup_steps=warmup, decay_steps=max(total_steps, warmup + 1)
    )


def build_optimizer(config: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    """`chain(clip_by_global_norm?, adam | adamw | sgd)` with the config's schedule."""
    # A constant rate is passed as a float, exactly `optax.adam(1e-3)` as in the lesson.
    schedule = config.lr if config.schedule == "constant" else build_schedule(config, total_steps)
    if config.optimizer == "adam":
        base = optax.adam(schedule)
    elif config.optimizer == "adamw":
        base = optax.adamw(schedule, weight_decay=config.weight_decay)
    else:
        base = optax.sgd(schedule)
    if config.clip_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), base)
