"""The lesson's training math, and nothing else: pure functions of arrays, keys and pytrees.

Read it beside the lesson's "Build it" steps; it imports JAX and Optax only, and every other module
takes these functions from here (the engine in `train.py` adds meshes, members, files and printing):

1. `init_params` (He init from split keys) and 2. the forward pass live with the model:
   `jaxintro.models.mlp` (`init_mlp`, `mlp_forward`), one of the four styles a `Model` wraps.
3. The loss: `cross_entropy` from log-softmax, `loss_fn` on a batch (`loss_and_logits` keeps the
   logits for the accuracy), on images scaled by `scale_images` inside the step.
4. The update: `train_step`, `value_and_grad` of the loss then the Optax update, pure, to be
   jitted with the model and optimizer bound (`functools.partial`); with an `axis_name`, the
   lesson's data parallelism: `pcast` the parameters, `pmean` the gradients.
5. The epoch: `plan_epoch` splits the epoch's keys and reshuffles, `step_key` gives each step its
   dropout key, and `train_epoch` runs every batch of the plan as one `lax.scan` (the lesson's Python
   loop is `train.python_epoch`, over the same plan). The engine compiles the plan as its own small
   program (`layout.compile_plan`): it depends on the data's size and the batch alone, so with the
   persistent cache a new model or learning rate never compiles the shuffle again (on a TPU its sort
   is most of an epoch's compile).
6. Evaluation: `correct_count`, how many argmax predictions equal the labels (the rule every score
   of jaxintro counts with), and `accuracy`, their share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

if TYPE_CHECKING:  # for the signatures only: the lesson needs nothing of jaxintro at run time
    from jaxintro.models.base import Model, Params


def scale_images(x_u8: Int[Array, "batch features"]) -> Float[Array, "batch features"]:
    """uint8 pixels to float32 in [0, 1]; done inside the step so the data stays uint8 in memory."""
    return x_u8.astype(jnp.float32) / 255.0


def cross_entropy(logits: Float[Array, "batch classes"], labels: Int[Array, " batch"]) -> Float[Array, ""]:
    """Mean cross-entropy from logits via log-softmax."""
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


def loss_fn(
    params: Params,
    apply: Callable,
    x: Float[Array, "batch features"],
    y: Int[Array, " batch"],
    key: jax.Array | None = None,
) -> Float[Array, ""]:
    """The model's mean cross-entropy on a batch; `key` switches dropout on."""
    return loss_and_logits(params, apply, x, y, key)[0]


def loss_and_logits(
    params: Params,
    apply: Callable,
    x: Float[Array, "batch features"],
    y: Int[Array, " batch"],
    key: jax.Array | None = None,
) -> tuple[Float[Array, ""], Float[Array, "batch classes"]]:
    """`loss_fn`, and the logits it came from (for `value_and_grad(..., has_aux=True)`)."""
    logits = apply(params, x, key)
    return cross_entropy(logits, y), logits


def correct_count(logits: Float[Array, "*rows batch classes"], labels: Int[Array, " batch"]) -> Int[Array, "*rows"]:
    """How many argmax predictions equal the labels (for each leading row of `logits`, e.g. each member)."""
    return jnp.sum(jnp.argmax(logits, axis=-1) == labels, axis=-1)


def accuracy(logits: Float[Array, "batch classes"], labels: Int[Array, " batch"]) -> Float[Array, ""]:
    """Fraction of argmax predictions equal to the labels."""
    return correct_count(logits, labels) / labels.shape[0]


def train_step(
    params: Params,
    opt_state: optax.OptState,
    batch: tuple[Array, Array],
    key: jax.Array | None,
    *,
    model: Model,
    tx: optax.GradientTransformation,
    axis_name: str | None = None,
    record_grad_norm: bool = False,
) -> tuple[Params, optax.OptState, dict[str, Array]]:
    """One Adam (or other) step on a uint8 batch; returns the loss and the correct count (and, with
    `record_grad_norm`, the gradient's global norm before any clipping, as "grad_norm").

    The correct count comes from the logits the loss was computed from (dropout on, parameters before
    the update), so the epoch's training accuracy costs no second forward pass. The norm only when asked for
    (a Python bool, bound before jit like the model): it is one more pass over every gradient at each step, except
    in a chain that clips by it, whose `clip_by_global_norm` computes the same `optax.tree.norm(grads)`, and XLA
    merges the two identical reductions into one.

    Inside `shard_map` (`axis_name` given) every device differentiates its own copy of the
    parameters on its slice of the batch, then `lax.pmean` averages loss and gradients: the
    lesson's `pmap` + `pmean`, in today's API.
    """
    x_u8, y = batch
    if axis_name is not None:
        # Without this cast JAX would sum the replicated parameters' gradients implicitly;
        # marking them per-device keeps the all-reduce explicit, as the lesson teaches it.
        params_for_grad = jax.lax.pcast(params, axis_name, to="varying")
    else:
        params_for_grad = params
    (loss, logits), grads = jax.value_and_grad(loss_and_logits, has_aux=True)(
        params_for_grad, model.apply, scale_images(x_u8), y, key)
    correct = correct_count(logits, y)
    if axis_name is not None:
        loss, grads = jax.lax.pmean((loss, grads), axis_name)
        correct = jax.lax.psum(correct, axis_name)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = {"loss": loss, "correct": correct}
    if record_grad_norm:
        metrics["grad_norm"] = optax.tree.norm(grads)
    return params, opt_state, metrics


def plan_epoch(key: jax.Array, num_examples: int, batch_size: int) -> tuple[jax.Array, Array, jax.Array]:
    """Split the epoch's keys: the next carry key, a permutation cut into batches, a dropout key."""
    key, perm_key, dropout_key = jax.random.split(key, 3)
    steps = num_examples // batch_size
    perm = jax.random.permutation(perm_key, num_examples)[: steps * batch_size]
    return key, perm.reshape(steps, batch_size), dropout_key


def step_key(dropout_key: jax.Array, step: Array | int, use_dropout: bool) -> jax.Array | None:
    """The dropout key of one step (None when the model has no dropout)."""
    return jax.random.fold_in(dropout_key, step) if use_dropout else None


def train_epoch(
    params: Params,
    opt_state: optax.OptState,
    batches: Int[Array, "steps batch"],
    dropout_key: jax.Array,
    x_u8: Array,
    y: Array,
    *,
    step: Callable,
    use_dropout: bool,
) -> tuple[Params, optax.OptState, dict[str, Array]]:
    """A whole epoch: `step` on every batch of the plan (rows of indices into `x_u8`, `y`) as one `lax.scan`, the
    per-step metrics stacked."""

    def body(carry, inputs):
        params, opt_state = carry
        i, idx = inputs
        params, opt_state, metrics = step(params, opt_state, (x_u8[idx], y[idx]), step_key(dropout_key, i, use_dropout))
        return (params, opt_state), metrics

    (params, opt_state), metrics = jax.lax.scan(body, (params, opt_state), (jnp.arange(batches.shape[0]), batches))
    return params, opt_state, metrics
