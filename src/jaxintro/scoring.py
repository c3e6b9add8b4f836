"""The score of a whole set: correct predictions and summed cross-entropy, a chunk at a time on the device.

Below the trainer and both layouts: one model is scored with it after every epoch, members and their
ensemble too (as a model whose outputs carry a row per member), and `evaluate` scores a reloaded run.
It counts with the lesson's own rule, `lesson.correct_count`.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from jaxintro.config import EVAL_CHUNK
from jaxintro.lesson import correct_count, scale_images
from jaxintro.models.base import Model, Params


def count_correct(
    params: Params, x_u8: Int[Array, "n features"], y: Int[Array, " n"], *, model: Model, chunk: int = EVAL_CHUNK
) -> tuple[Array, Array]:
    """Correct predictions and summed cross-entropy over a whole set, `chunk` images at a time.

    The chunks are static slices of the arrays already on the device, so a set is never copied. A
    model whose outputs carry leading axes (`(rows, batch, classes)`, e.g. members and their
    ensemble) gets a count and a loss per row.
    """

    def one_chunk(xc, yc):
        log_probs = jax.nn.log_softmax(model.apply(params, scale_images(xc), None))
        labels = jnp.broadcast_to(yc[:, None], (*log_probs.shape[:-1], 1))
        nll = -jnp.take_along_axis(log_probs, labels, axis=-1)[..., 0]
        return correct_count(log_probs, yc), jnp.sum(nll, axis=-1)

    n = x_u8.shape[0]
    chunk = min(chunk, n)
    full = n // chunk * chunk
    correct, loss = jax.lax.map(
        lambda inputs: one_chunk(*inputs),
        (x_u8[:full].reshape(-1, chunk, x_u8.shape[1]), y[:full].reshape(-1, chunk)),
    )
    correct, loss = jnp.sum(correct, axis=0), jnp.sum(loss, axis=0)
    if full < n:  # the remainder, a static shape too
        tail_correct, tail_loss = one_chunk(x_u8[full:], y[full:])
        correct, loss = correct + tail_correct, loss + tail_loss
    return correct, loss


def jit_count_correct(model: Model) -> Callable:
    """`count_correct` of `model`, compiled."""
    return jax.jit(functools.partial(count_correct, model=model))
