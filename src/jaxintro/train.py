"""The engine: the lesson's step and epoch (`jaxintro.lesson`) compiled, placed on devices, and run by `fit`.

`Trainer` builds the model and optimizer a config describes and compiles them: the whole epoch as
one XLA program after the shuffle's own (`--loop scan`, the default), or the lesson's jitted step, one
call per batch from Python (`--loop python`, `python_epoch`). Both draw the same permutation and
dropout keys, so they train the same function. The last partial batch of each epoch is dropped, as
in the lesson (468 steps of 128 on MNIST's 60,000 images); the permutation changes each epoch, so
every image is still seen. How the models sit on the devices is the layout's, picked once in
`Trainer.create`: one model (`layout.OneModel`) or several members (`members.Members`, the same
epoch mapped over them); the trainer calls it and never branches on the member count. Only `fit`
touches the outside world: it logs, times, and calls the per-epoch hook.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np
import optax
from jaxtyping import Array

from jaxintro.config import TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import ConfigError
from jaxintro.i18n import _
from jaxintro.layout import OneModel, bound_step, compile_plan, placed
from jaxintro.lesson import step_key
from jaxintro.members import Members
from jaxintro.memory import check_memory
from jaxintro.models import Model, Params, model_for, param_count
from jaxintro.optim import build_optimizer, build_schedule
from jaxintro.parallel import host_device, to_host
from jaxintro.record import EpochMetrics, Scores
from jaxintro.runtime import compile_cache_counts, release_free_memory


class TrainState(NamedTuple):
    """What training carries from epoch to epoch (and what a checkpoint holds)."""

    params: Params
    opt_state: optax.OptState
    key: jax.Array  # split once per epoch into the shuffle and dropout keys
    epoch: int


# ---------------------------------------------------------------- the trainer


class CompiledEpoch(NamedTuple):
    """One epoch of training, compiled: `run(state, on_step)` trains it (`on_step(1)` after each of the lesson's
    loop's steps) and returns the next state and the per-step metrics; `programs` are the XLA executables it runs,
    the shuffle (`compile_plan`) first."""

    run: Callable[..., tuple["TrainState", dict[str, Array]]]
    programs: tuple[Any, ...]


@dataclasses.dataclass
class Trainer:
    """A model, an optimizer, their layout on the devices and their compiled functions, for one config and dataset."""

    config: TrainConfig
    model: Model
    tx: optax.GradientTransformation
    steps_per_epoch: int
    schedule: Callable[[int], Any]
    layout: OneModel | Members  # one model over the `data` mesh, or several members over the `members` mesh

    @classmethod
    def create(cls, config: TrainConfig, dataset: Dataset) -> "Trainer":
        """Build the model, the optimizer and the layout that `config` describes for `dataset`, checked to fit in
        memory."""
        if config.batch_size > len(dataset.x_train):
            raise ConfigError(_(
                "--batch-size {batch_size} is larger than the {count} training images of {dataset}; "
                "use at most {count}"
            ).format(batch_size=config.batch_size, count=len(dataset.x_train), dataset=dataset.name))
        steps = len(dataset.x_train) // config.batch_size
        model = model_for(config, dataset.num_features, dataset.num_classes)
        tx = build_optimizer(config, steps * config.epochs)
        layout = (OneModel if config.members == 1 else Members)(config, model, tx)  # the one decision
        # Before anything is allocated or compiled: a model too big for memory is refused in a second, not grown into.
        check_memory(config, model.sizes, len(dataset.x_train), devices=layout.mesh.size, copies=layout.copies)
        return cls(config, model, tx, steps, build_schedule(config, steps * config.epochs), layout)

    @property
    def mesh(self) -> Any:
        """The run's mesh (jax.sharding.Mesh): one axis, "data" for one model, "members" for several."""
        return self.layout.mesh

    def init_state(self) -> TrainState:
        """Parameters from the seed's key (split for init, the rest carried) and a fresh optimizer state; several
        members each start as their single run does, stacked on a leading axis (`members.init_members`).

        The weights are drawn by one jitted program on the host's CPU (`layout.jitted_draw`: a uint32 seed in, so
        one program serves every seed and the persistent cache keeps it), then placed on the devices by `place`: the
        same seed gives the same initial weights, bit for bit, on every backend.
        """
        with jax.default_device(host_device()):
            return TrainState(*self.layout.init(), 0)

    def step_fn(self) -> Callable:
        """The pure train step with the model and optimizer bound."""
        return bound_step(self.config, self.model, self.tx)

    def jit_step(self) -> Callable:
        """The lesson's jitted `train_step`, one call per batch."""
        return jax.jit(self.step_fn(), donate_argnums=(0, 1))

    def compile_step(self, state: TrainState, batch: tuple[Array, Array]) -> Any:
        """`jit_step` compiled for `batch`'s shapes (the lesson's loop runs it; `profile` reads its cost analysis)."""
        key = step_key(state.key, 0, self.config.use_dropout)
        return self.jit_step().lower(state.params, state.opt_state, batch, key).compile()

    def cost_steps(self, state: TrainState, batch: tuple[Array, Array]) -> list[tuple[Any, int]]:
        """The compiled steps whose cost analyses add up to one step of every model, each with how many times an
        epoch's step runs it (the layout's; `profile` reads them)."""
        return self.layout.cost_steps(state, batch, self.compile_step)

    def compile_epoch(self, state: TrainState, train: tuple[Array, Array]) -> "CompiledEpoch":
        """One epoch of training on `train` (placed by `place`), compiled: the one place an epoch is compiled, for
        `fit`, every `bench` row that trains, and `profile`.

        Both loops shuffle first, with the plan's own small program (`compile_plan`). `--loop scan`: then the
        whole epoch as one program. `--loop python`: the lesson's loop, the compiled step once per batch from Python.
        """
        x, y = train
        plan = compile_plan(self.layout.plan_fn(len(x)), state.key)
        if self.config.loop == "scan":
            program = self.lower_epoch(state, train).compile()

            def run(state: TrainState, on_step: Callable[[int], Any] = lambda n: None):
                key, batches, dropout_key = plan(state.key)
                params, opt_state, metrics = program(state.params, state.opt_state, batches, dropout_key, x, y)
                return TrainState(params, opt_state, key, state.epoch + 1), metrics

            return CompiledEpoch(run, (plan, program))
        batch = self.config.batch_size
        step = self.compile_step(state, (x[:batch], y[:batch]))

        def run(state: TrainState, on_step: Callable[[int], Any] = lambda n: None):
            params, opt_state, key, metrics = python_epoch(state, step, plan, x, y, use_dropout=self.config.use_dropout,
                                                           on_step=on_step)
            return TrainState(params, opt_state, key, state.epoch + 1), metrics

        return CompiledEpoch(run, (plan, step))

    def lower_epoch(self, state: TrainState, train: tuple[Array, Array]) -> Any:
        """The epoch program (`jit_epoch`) lowered for `state` and `train`, and for the plan its keys give (shapes
        only: no shuffle runs); what `compile_epoch` compiles, and what a test reads the HLO of."""
        x, y = train
        planned = jax.eval_shape(self.layout.plan_fn(len(x)), state.key)
        planned = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=placed(state.key)) for a in planned[1:]]
        return self.jit_epoch().lower(state.params, state.opt_state, *planned, x, y)

    def jit_epoch(self) -> Callable:
        """The whole epoch compiled as one program over the layout's mesh, parameters and optimizer state donated."""
        return self.layout.jit_epoch()

    def place(self, state: TrainState, dataset: Dataset) -> tuple[TrainState, tuple[Array, Array], tuple[Array, Array]]:
        """Put the state, the training set and the test set where the layout trains and evaluates them."""
        return self.layout.place(state, dataset)

    def jit_eval(self) -> Callable:
        """`score(params, x, y, diverged)`: correct count and summed loss over a chunked set, compiled; with several
        members, one row per member and a last row for the ensemble of those not in `diverged`."""
        return self.layout.jit_eval()


@dataclasses.dataclass
class FitResult:
    """What a finished (or stopped) run reports."""

    state: TrainState
    history: list[EpochMetrics]
    step_metrics: list[dict[str, np.ndarray]]
    param_count: int
    train_seconds: float
    compile_seconds: float
    samples_per_second: float  # all members together, with several
    compile_cache: str = "off"  # the training program came from the persistent cache ("hit"), or not
    eval_seconds: float = 0.0  # evaluating after every epoch (the first time includes compiling the evaluation)
    init_seconds: float = 0.0  # initialising (or restoring: placing) the state and putting it and the data on devices
    stopped_early: bool = False


EpochHook = Callable[[TrainState, EpochMetrics], None]


def fit(
    config: TrainConfig,
    dataset: Dataset,
    *,
    state: TrainState | None = None,
    on_epoch: EpochHook | None = None,
    log: Callable[[str], None] = print,
    progress: bool = False,
    should_stop: Callable[[int], bool] = lambda epoch: False,
    diverged_before: Sequence[int] = (),
    trainer: Trainer | None = None,
    validation: tuple[np.ndarray, np.ndarray] | None = None,
) -> FitResult:
    """Train `config.epochs` epochs (from `state` when resuming, with the members `diverged_before` it), scoring the
    test set after each, as the lesson does (`trainer`: `Trainer.create`'s, if made). With `validation` (held-out
    images, `hold_out`) those are scored after each epoch, and the test set only after the epoch the run ends at (its
    last, or the one `should_stop` stops it after): it reports a result and chooses nothing, not even when to look."""
    from tqdm import tqdm  # loaded when training, not when the trainer is imported

    trainer = trainer or Trainer.create(config, dataset)
    init_start = time.perf_counter()
    state, (x_train, y_train), (x_test, y_test) = trainer.place(state or trainer.init_state(), dataset)
    held_out = None if validation is None else trainer.layout.place_eval(validation)
    jax.block_until_ready(state)
    init_seconds = time.perf_counter() - init_start
    eval_fn = trainer.jit_eval()
    # A member that diverged before a resume stays diverged: the resumed run reports what the uninterrupted one does.
    diverged = set(diverged_before)
    epoch_program, compile_seconds, compile_cache = compile_timed(trainer, state, (x_train, y_train))

    history: list[EpochMetrics] = []
    step_metrics: list[dict[str, np.ndarray]] = []
    train_seconds = eval_seconds = 0.0
    stopped = False
    epochs = range(state.epoch + 1, config.epochs + 1)
    # A bar step per epoch, or per batch in the lesson's loop (on a terminal only).
    per_batch = config.loop != "scan"
    bar = tqdm(total=len(epochs) * (trainer.steps_per_epoch if per_batch else 1), disable=not progress,
               leave=False, unit=_("step") if per_batch else _("epoch"))
    for epoch in epochs:
        start = time.perf_counter()
        state, metrics = epoch_program.run(state, on_step=bar.update)
        bar.update(0 if per_batch else 1)
        metrics = to_host(metrics)  # a device-host sync point: the epoch really ran
        seconds = time.perf_counter() - start
        train_seconds += seconds
        # Asked after every epoch, before its scores (it may be a collective): a run that stops here ends here.
        stopped = should_stop(epoch) and epoch < config.epochs
        # Unseen images only: the training accuracy came with the epoch's own forward passes.
        eval_start = time.perf_counter()
        known, ends = len(diverged), stopped or epoch == config.epochs
        test, scores = score_unseen(eval_fn, state.params, (x_test, y_test), held_out, diverged, ends=ends)
        for unseen, is_held_out in ((scores, True), (test, False)):  # every loss on unseen images scored now
            if unseen is not None:
                trainer.layout.check_epoch(metrics, unseen.loss, epoch, trainer.steps_per_epoch, diverged,
                                           held_out=is_held_out)
        if len(diverged) > known and test is not None:  # a member diverged now: the test ensemble, again, without it
            test, _none = score_unseen(eval_fn, state.params, (x_test, y_test), None, diverged, ends=True)
        eval_seconds += time.perf_counter() - eval_start
        if epoch == epochs[0]:
            release_free_memory()  # the evaluation program was compiled just now
        learning_rate = float(trainer.schedule(epoch * trainer.steps_per_epoch - 1))
        row = trainer.layout.epoch_row(epoch, metrics, test, learning_rate=learning_rate, seconds=seconds,
                                       diverged=diverged, validation=scores)
        history.append(row)
        step_metrics.append(metrics)
        with tqdm.external_write_mode():  # the line goes above the progress bar, not through it
            log(trainer.layout.epoch_line(row))
        if on_epoch is not None:
            on_epoch(state, row)
        if stopped:
            break
    bar.close()

    samples = len(history) * trainer.steps_per_epoch * config.batch_size * config.members
    return FitResult(state=state, history=history, step_metrics=step_metrics, compile_seconds=compile_seconds,
                     param_count=param_count(state.params) // config.members, train_seconds=train_seconds,
                     samples_per_second=samples / train_seconds if train_seconds > 0 else math.nan,
                     compile_cache=compile_cache, eval_seconds=eval_seconds, init_seconds=init_seconds,
                     stopped_early=stopped)


def score_unseen(eval_fn: Callable, params: Any, test: tuple[Array, Array], held_out: tuple[Array, Array] | None,
                 diverged: set[int], *, ends: bool) -> tuple[Scores | None, Scores | None]:
    """The test set's scores and the held-out images' (None: not scored), without the `diverged` members. With
    held-out images, the test set is scored only in the epoch the run `ends` at."""
    def score(x: Array, y: Array) -> Scores:
        return Scores(*to_host(eval_fn(params, x, y, sorted(diverged))), len(y))

    return score(*test) if held_out is None or ends else None, None if held_out is None else score(*held_out)


def hold_out(dataset: Dataset, count: int, batch_size: int) -> tuple[Dataset, tuple[np.ndarray, np.ndarray] | None]:
    """The dataset trained on, without its last `count` training images, and those images with their labels (None
    when `count` is 0): a validation split, the same for every seed, to choose with, so that the test set does not."""
    if count == 0:
        return dataset, None
    kept = len(dataset.x_train) - count
    if kept < batch_size:
        raise ConfigError(_("--validation {count} leaves {kept} of the {total} training images of {dataset}, fewer "
                            "than a batch ({batch}); hold out at most {most}").format(
            count=count, kept=max(kept, 0), total=len(dataset.x_train), dataset=dataset.name, batch=batch_size,
            most=len(dataset.x_train) - batch_size))
    trained = dataset._replace(x_train=dataset.x_train[:kept], y_train=dataset.y_train[:kept])
    return trained, (dataset.x_train[kept:], dataset.y_train[kept:])


def compile_timed(trainer: Trainer, state: TrainState, train: tuple[Array, Array]) -> tuple[CompiledEpoch, float, str]:
    """`Trainer.compile_epoch`, its seconds, and what the persistent cache did for it: "hit", "miss" or "off"
    (for the training program alone: the evaluation programs are counted apart)."""
    before = compile_cache_counts()
    start = time.perf_counter()
    program = trainer.compile_epoch(state, train)
    release_free_memory()  # before the first epoch, not after the run
    seconds = time.perf_counter() - start
    cache_on = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
    # Its programs (the shuffle, the epoch or the step) all found: a hit; any one compiled anew: a miss.
    after = compile_cache_counts()
    found = after["hits"] > before["hits"] and after["misses"] == before["misses"]
    cache = "off" if not cache_on else "hit" if found else "miss"
    return program, seconds, cache


def python_epoch(
    state: TrainState,
    step_fn: Callable,
    plan_fn: Callable,
    x_u8: np.ndarray,
    y: np.ndarray,
    *,
    use_dropout: bool,
    on_step: Callable[[int], Any] = lambda n: None,
) -> tuple[Params, optax.OptState, jax.Array, dict[str, Array]]:
    """The lesson's loop: shuffle (`plan_fn(key)`: `plan_epoch` for this set and batch size), then one jitted step
    per batch, sliced from the host arrays and dispatched from Python."""
    key, perm, dropout_key = plan_fn(state.key)
    perm = np.asarray(perm)
    params, opt_state = state.params, state.opt_state
    per_step = []
    for i, idx in enumerate(perm):
        params, opt_state, metrics = step_fn(params, opt_state, (x_u8[idx], y[idx]), step_key(dropout_key, i, use_dropout))
        per_step.append(metrics)
        on_step(1)
    per_step = jax.device_get(per_step)  # one sync at the end of the epoch, not one per step
    return params, opt_state, key, {name: np.stack([m[name] for m in per_step]) for name in per_step[0]}
