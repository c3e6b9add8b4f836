"""The speedrun: the lesson's MLP to a target test accuracy as fast as this machine allows, every trick an Optax piece.

A `Recipe` says how the lesson's model (784-256-128-10, He init, ReLU, no augmentation) trains: the batch, the
peak learning rate and its schedule (`optax.warmup_cosine_decay_schedule`), label smoothing
(`optax.smooth_labels`), a running average of the weights (`optax.incremental_update`), inputs standardised with
the training set's own mean and spread, and how the run is compiled: the whole run as one program (`lax.scan` over
epochs, each a `lax.scan` over steps, the data resident on the device), one program per epoch, or the lesson's loop
(one jitted step per batch, batches sliced from host memory). Each epoch ends with the test accuracy of the weights
it would keep, so one program yields the whole curve. Many seeds train as one vmapped program (`evidence`); one
model is timed alone (`timed_run`). `torch_run` trains the same recipe in PyTorch eager, on the same learning-rate
sequence, taken from the Optax schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxintro.bench import lesson_job
from jaxintro.bench_plan import make_plan
from jaxintro.bench_torch import torch_mlp
from jaxintro.config import LESSON_SIZES
from jaxintro.data import Dataset
from jaxintro.layout import bound_plan, compile_plan
from jaxintro.lesson import correct_count, plan_epoch, scale_images
from jaxintro.models.mlp import dense_layers, init_params, mlp_forward

PROGRAMS = ("run", "epoch", "step")  # the whole run / one program per epoch / the lesson's loop on host data


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How the lesson's MLP is trained: every field one trick the ablation can take away."""

    epochs: int = 5
    batch_size: int = 256
    peak_lr: float = 3e-3
    schedule: str = "warmup-cosine"  # or "constant" (the lesson's: the peak learning rate throughout)
    warmup_steps: int = 200
    label_smoothing: float = 0.0
    average: float = 0.0  # the weight average's decay per step (0: the last weights are kept)
    standardize: bool = False  # inputs as (x - mean) / std of the training pixels, not x / 255
    program: str = "run"


LESSON = Recipe(epochs=10, batch_size=128, peak_lr=1e-3, schedule="constant", program="epoch")

Batch = tuple[jax.Array, jax.Array]


def learning_rates(recipe: Recipe, total_steps: int) -> optax.Schedule:
    """The learning rate at each step: constant (the lesson's), or linear warm-up then cosine decay to zero."""
    if recipe.schedule == "constant":
        return optax.constant_schedule(recipe.peak_lr)
    warmup = min(recipe.warmup_steps, total_steps - 1)
    return optax.warmup_cosine_decay_schedule(0.0, recipe.peak_lr, warmup, decay_steps=total_steps)


def input_scale(recipe: Recipe, x_train: np.ndarray) -> tuple[float, float]:
    """(shift, scale) with x_float = (x_u8 / 255 - shift) / scale: the training set's own statistics, or (0, 1)."""
    if not recipe.standardize:
        return 0.0, 1.0
    pixels = x_train.astype(np.float64) / 255.0
    return float(pixels.mean()), float(pixels.std())


def model_sizes(dataset: Dataset) -> tuple[int, ...]:
    """The lesson's layers on this data: its pixels in, 256 and 128 hidden units, its classes out."""
    return (dataset.num_features, *LESSON_SIZES[1:-1], len(dataset.classes))


def steps_per_epoch(recipe: Recipe, num_examples: int) -> int:
    """Whole batches per epoch (the partial one is dropped, as in the lesson)."""
    return num_examples // recipe.batch_size


def make_program(recipe: Recipe, dataset: Dataset) -> dict[str, Callable]:
    """The recipe's pure functions on this data: `init(key)`, `step`, `epoch`, `run` and `evaluate`."""
    sizes = model_sizes(dataset)
    shift, scale = input_scale(recipe, dataset.x_train)
    steps = steps_per_epoch(recipe, len(dataset.x_train))
    tx = optax.adam(learning_rates(recipe, steps * recipe.epochs))
    classes = len(dataset.classes)

    def features(x_u8: jax.Array) -> jax.Array:
        return (scale_images(x_u8) - shift) / scale

    def loss(params: Any, x_u8: jax.Array, y: jax.Array) -> jax.Array:
        labels = optax.smooth_labels(jax.nn.one_hot(y, classes), recipe.label_smoothing)
        return optax.softmax_cross_entropy(mlp_forward(params, features(x_u8)), labels).mean()

    def init(key: jax.Array) -> tuple[Any, Any]:
        # Split first, as `jaxintro train` does: the weights' key is used once, and the key the epochs split again
        # (the shuffles) is another one.
        init_key, key = jax.random.split(key)
        params = init_params(init_key, sizes)
        return (params, tx.init(params), params), key

    def step(state: tuple, batch: Batch) -> tuple[tuple, jax.Array]:
        params, opt_state, average = state
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        average = optax.incremental_update(params, average, 1.0 - recipe.average) if recipe.average else params
        return (params, opt_state, average), value

    def evaluate(state: tuple, x_u8: jax.Array, y: jax.Array) -> jax.Array:
        # A count, an integer: a float32 fraction would make 9,800 of 10,000 read as more than 0.98.
        return correct_count(mlp_forward(state[2], features(x_u8)), y)

    def epoch(carry: tuple, data: tuple) -> tuple[tuple, jax.Array]:
        state, key = carry
        x_u8, y, x_test, y_test = data
        key, perm, _ = plan_epoch(key, x_u8.shape[0], recipe.batch_size)
        state, _losses = jax.lax.scan(lambda s, idx: step(s, (x_u8[idx], y[idx])), state, perm)
        return (state, key), evaluate(state, x_test, y_test)

    def run(carry: tuple, data: tuple) -> tuple[tuple, jax.Array]:
        return jax.lax.scan(lambda c, _: epoch(c, data), carry, None, length=recipe.epochs)

    return {"init": init, "step": step, "epoch": epoch, "run": run, "evaluate": evaluate}


def device_data(dataset: Dataset) -> tuple[jax.Array, ...]:
    """The four arrays on the device, uint8 images and int32 labels, once for the whole run."""
    return tuple(jax.device_put(a) for a in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test))


def accuracy(correct: Any, dataset: Dataset) -> np.ndarray:
    """Correct counts as fractions of the test set, in float64: exact where they are (9,800 of 10,000 is 0.98)."""
    return np.asarray(correct, np.float64) / len(dataset.y_test)


def evidence(recipe: Recipe, dataset: Dataset, seeds: int, first_seed: int = 0) -> np.ndarray:
    """The test accuracy after every epoch of `seeds` models (seeds first_seed, first_seed + 1, ...) trained as one
    vmapped program: an array (seeds, epochs)."""
    program = make_program(dataset=dataset, recipe=dataclasses.replace(recipe, program="run"))
    carry = jax.vmap(program["init"])(jax.vmap(jax.random.key)(jnp.arange(first_seed, first_seed + seeds)))
    data = device_data(dataset)
    run = jax.jit(jax.vmap(program["run"], in_axes=(0, None)))
    _carry, curves = run(carry, data)
    return accuracy(curves, dataset)


def timed_run(recipe: Recipe, dataset: Dataset, seed: int = 0, compiled: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """One model trained as `recipe.program` says: its curve, and the seconds spent compiling and training.

    `compiled`, kept by the caller across the rounds of one recipe on one dataset, holds what the first round
    compiled: a later round times the same executable, and its `compile_seconds` is None (nothing compiled).
    """
    compiled = {} if compiled is None else compiled
    program = make_program(recipe, dataset)
    start = time.perf_counter()
    data = device_data(dataset) if recipe.program != "step" else None
    carry = program["init"](jax.random.key(seed))
    jax.block_until_ready(carry)
    setup_seconds = time.perf_counter() - start
    runner = {"run": _whole_run, "epoch": _epoch_by_epoch, "step": _step_by_step}[recipe.program]
    compile_seconds, train, curve = runner(program, recipe, dataset, carry, data, compiled)
    return {"curve": [float(a) for a in accuracy(curve, dataset)], "setup_seconds": setup_seconds,
            "compile_seconds": compile_seconds, "train_seconds": train}


def compile_once(compiled: dict[str, Any], name: str, build: Callable[[], Any]) -> float | None:
    """`compiled[name] = build()` unless an earlier round built it; the seconds that took (None: built before)."""
    if name in compiled:
        return None
    start = time.perf_counter()
    compiled[name] = build()
    return time.perf_counter() - start


def _whole_run(program: dict, recipe: Recipe, dataset: Dataset, carry: tuple, data: tuple, compiled: dict) -> tuple:
    """All epochs as one compiled program: compile it ahead of time, then time its one call."""
    compile_seconds = compile_once(compiled, "run", lambda: jax.jit(program["run"]).lower(carry, data).compile())
    start = time.perf_counter()
    _carry, curve = jax.block_until_ready(compiled["run"](carry, data))
    return compile_seconds, time.perf_counter() - start, np.asarray(curve)


def _epoch_by_epoch(program: dict, recipe: Recipe, dataset: Dataset, carry: tuple, data: tuple,
                    compiled: dict) -> tuple:
    """One compiled program per epoch, called `recipe.epochs` times (as `jaxintro train` runs)."""
    compile_seconds = compile_once(compiled, "epoch", lambda: jax.jit(program["epoch"]).lower(carry, data).compile())
    curve = []
    start = time.perf_counter()
    for _ in range(recipe.epochs):
        carry, accuracy = compiled["epoch"](carry, data)
        curve.append(accuracy)
    curve = jax.block_until_ready(curve)
    return compile_seconds, time.perf_counter() - start, np.asarray(curve)


def _step_by_step(program: dict, recipe: Recipe, dataset: Dataset, carry: tuple, data: None,
                  compiled: dict) -> tuple:
    """The lesson's loop: one jitted step per batch, each batch sliced from host memory; the first call compiles."""
    state, key = carry
    x, y = dataset.x_train, dataset.y_train

    def build() -> tuple[Callable, Callable, Any]:
        step, evaluate = jax.jit(program["step"]), jax.jit(program["evaluate"])
        jax.block_until_ready(step(state, (x[: recipe.batch_size], y[: recipe.batch_size])))  # compile, unused
        evaluate(state, dataset.x_test, dataset.y_test).block_until_ready()
        return step, evaluate, compile_plan(bound_plan(len(x), recipe.batch_size), key)  # `train`'s shuffle

    compile_seconds = compile_once(compiled, "step", build)
    step, evaluate, shuffle = compiled["step"]
    curve = []
    start = time.perf_counter()
    for _ in range(recipe.epochs):
        key, perm, _ = shuffle(key)
        for idx in np.asarray(perm):
            state, _loss = step(state, (x[idx], y[idx]))
        curve.append(evaluate(state, dataset.x_test, dataset.y_test))
    curve = jax.block_until_ready(curve)
    return compile_seconds, time.perf_counter() - start, np.asarray(curve)


def lesson_script(dataset: Dataset, epochs: int) -> dict[str, Any]:
    """The lesson's own script (`bench.lesson_job`), timed whole: its compile and its evaluations included."""
    plan = make_plan(dataset.x_train, dataset.y_train, repeats=1)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its own epoch lines: the records table says what they said
        result = lesson_job(plan, dataset.x_test, dataset.y_test, epochs)
    return {"curve": result["curve"], "train_seconds": time.perf_counter() - start}


def one_sided_test(accuracies: np.ndarray, target: float) -> tuple[float, float]:
    """(t, p) of the one-sided t-test that the mean accuracy exceeds `target` (H0: mean <= target).

    modded-nanogpt's rule for a record: with n seeds, t = (mean - target) / (std / sqrt(n)), std with n - 1,
    p the upper tail of Student's t with n - 1 degrees of freedom."""
    accuracies = np.asarray(accuracies, np.float64)  # the evidence arrives float32: no rounding in the spread
    n = len(accuracies)
    if n < 2:  # one seed has no spread: it is no evidence either way
        return math.nan, 1.0
    mean, std = float(np.mean(accuracies)), float(np.std(accuracies, ddof=1))
    if np.ptp(accuracies) == 0:  # seeds that agree exactly: certain, on whichever side of the target they are
        return (math.inf, 0.0) if mean > target else (-math.inf, 1.0)
    from scipy import stats  # here, not at the top: half a second of import that only this test needs

    t = (mean - target) / (std / math.sqrt(n))
    return t, float(stats.t.sf(t, n - 1))


def first_epoch_at(curve: list[float], target: float) -> int | None:
    """The first epoch (1-based) at which one model's test accuracy reaches `target`; None if none does."""
    return next((i + 1 for i, accuracy in enumerate(curve) if accuracy >= target), None)


def seconds_to(train_seconds: float, epochs: int, epoch: int | None) -> float | None:
    """The training seconds until the end of `epoch` (epochs take equal time); None when it is never reached."""
    return None if epoch is None else train_seconds * epoch / epochs


def torch_run(recipe: Recipe, dataset: Dataset, seed: int = 0) -> dict[str, Any]:
    """The same recipe in PyTorch eager on the CPU: the same initial weights, learning rates (the Optax schedule's,
    step by step), label smoothing, weight average and input scaling; its curve and training seconds."""
    import torch

    init_key, _carried = jax.random.split(jax.random.key(seed))  # the JAX recipe's initial weights (`make_program`)
    params = init_params(init_key, model_sizes(dataset))
    layers = [(np.asarray(w), np.asarray(b)) for w, b in dense_layers(params)]
    model, average = torch_mlp(layers), torch_mlp(layers)
    steps = steps_per_epoch(recipe, len(dataset.x_train))
    rates = np.asarray(learning_rates(recipe, steps * recipe.epochs)(jnp.arange(steps * recipe.epochs)))
    opt = torch.optim.Adam(model.parameters(), lr=float(rates[0]))
    shift, scale = input_scale(recipe, dataset.x_train)
    x, y = torch.from_numpy(dataset.x_train), torch.from_numpy(dataset.y_train.astype(np.int64))
    x_test, y_test = torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test.astype(np.int64))
    generator = torch.Generator().manual_seed(seed)
    kept, trained = list(average.parameters()), list(model.parameters())
    kept_model = average if recipe.average else model  # without an average, the last weights are the ones scored
    standardize = (shift, scale) != (0.0, 1.0)
    curve, start = [], time.perf_counter()
    for epoch in range(recipe.epochs):
        perm = torch.randperm(len(x), generator=generator)[: steps * recipe.batch_size].view(steps, -1)
        for i, idx in enumerate(perm):
            for group in opt.param_groups:
                group["lr"] = float(rates[epoch * steps + i])
            opt.zero_grad(set_to_none=True)
            inputs = x[idx].float() / 255.0
            logits = model((inputs - shift) / scale if standardize else inputs)
            torch.nn.functional.cross_entropy(logits, y[idx], label_smoothing=recipe.label_smoothing).backward()
            opt.step()
            if recipe.average:
                with torch.no_grad():
                    torch._foreach_lerp_(kept, trained, 1.0 - recipe.average)
        with torch.no_grad():
            predicted = kept_model((x_test.float() / 255.0 - shift) / scale).argmax(1)
        curve.append(float(accuracy(int((predicted == y_test).sum()), dataset)))
    return {"curve": curve, "train_seconds": time.perf_counter() - start}
