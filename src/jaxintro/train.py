"""The engine: the lesson's step and epoch (`jaxintro.lesson`) compiled, placed on devices, and run by `fit`.

`Trainer` builds the model and optimizer a config describes and compiles them: the whole epoch as
one XLA program (`--loop scan`, the default, shuffle included), or the lesson's jitted step, one
call per batch from Python (`--loop python`, `python_epoch`). Both draw the same permutation and
dropout keys, so they train the same function. The last partial batch of each epoch is dropped, as
in the lesson (468 steps of 128 on MNIST's 60,000 images); the permutation changes each epoch, so
every image is still seen. Several members (`--seeds N`, or a sweep's grid) are trained by the same
epoch, mapped over them (`lax.map`, or `jax.vmap` in groups): parameters, optimizer states and keys
carry a leading member axis, split over a `members` mesh (on a CPU, one device per core); the data
does not. Only `fit` touches the outside world: it logs, times, and calls the per-epoch hook.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Int

from jaxintro.config import EVAL_CHUNK, TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import TrainingDivergedError
from jaxintro.i18n import _
from jaxintro.lesson import plan_epoch, scale_images, step_key, train_epoch, train_step
from jaxintro.models import Model, Params, model_for, param_count
from jaxintro.optim import build_optimizer, build_schedule

EXPLODED_LOSS = 1e6  # a finite loss above this means training has blown up


class TrainState(NamedTuple):
    """What training carries from epoch to epoch (and what a checkpoint holds)."""

    params: Params
    opt_state: optax.OptState
    key: jax.Array  # split once per epoch into the shuffle and dropout keys
    epoch: int


# ---------------------------------------------------------------- evaluation over a whole set


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
        return jnp.sum(jnp.argmax(log_probs, -1) == yc, axis=-1), jnp.sum(nll, axis=-1)

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


# ---------------------------------------------------------------- the trainer


class CompiledEpoch(NamedTuple):
    """One epoch of training, compiled: `run(state, on_step)` trains it (`on_step(1)` after each of the lesson's
    loop's steps) and returns the next state and the per-step metrics; `programs` are the XLA executables it runs."""

    run: Callable[..., tuple["TrainState", dict[str, Array]]]
    programs: tuple[Any, ...]


@dataclasses.dataclass
class Trainer:
    """A model, an optimizer and their compiled functions for one config and one dataset."""

    config: TrainConfig
    model: Model
    tx: optax.GradientTransformation
    steps_per_epoch: int
    schedule: Callable[[int], Any]
    mesh: Any  # jax.sharding.Mesh with one axis: "data", or "members" when several models train

    @classmethod
    def create(cls, config: TrainConfig, dataset: Dataset) -> "Trainer":
        """Build the model and optimizer that `config` describes for `dataset` (members: checked to fit in memory)."""
        from jaxintro.errors import ConfigError

        if config.batch_size > len(dataset.x_train):
            raise ConfigError(_(
                "--batch-size {batch_size} is larger than the {count} training images of {dataset}; "
                "use at most {count}"
            ).format(batch_size=config.batch_size, count=len(dataset.x_train), dataset=dataset.name))
        from jaxintro.members import check_memory, make_run_mesh

        mesh = make_run_mesh(config)
        steps = len(dataset.x_train) // config.batch_size
        model = model_for(config, dataset.num_features, dataset.num_classes)

        # Before anything is allocated or compiled: a model too big for memory is refused in a second, not grown into.
        check_memory(config, model.sizes, len(dataset.x_train), devices=mesh.size)
        tx = build_optimizer(config, steps * config.epochs)
        return cls(config, model, tx, steps, build_schedule(config, steps * config.epochs), mesh)

    def init_state(self) -> TrainState:
        """Parameters from the seed's key (split for init, the rest carried) and a fresh optimizer state; several
        members each start as their single run does, stacked on a leading axis (`members.init_members`)."""
        from jaxintro.members import init_members

        return TrainState(*init_members(self.config, self._init_member), 0)

    def _init_member(self, seed: int | Array) -> tuple[Params, optax.OptState, jax.Array]:
        init_key, key = jax.random.split(jax.random.key(seed))
        params = self.model.init(init_key)
        return params, self.tx.init(params), key

    @property
    def use_dropout(self) -> bool:
        """Whether steps need a dropout key."""
        return self.config.dropout > 0.0

    def step_fn(self) -> Callable:
        """The pure train step with the model and optimizer bound."""
        return functools.partial(train_step, model=self.model, tx=self.tx)

    def jit_step(self) -> Callable:
        """The lesson's jitted `train_step`, one call per batch."""
        return jax.jit(self.step_fn(), donate_argnums=(0, 1))

    def compile_step(self, state: TrainState, batch: tuple[Array, Array]) -> Any:
        """`jit_step` compiled for `batch`'s shapes (the lesson's loop runs it; `profile` reads its cost analysis)."""
        key = step_key(state.key, 0, self.use_dropout)
        return self.jit_step().lower(state.params, state.opt_state, batch, key).compile()

    def compile_epoch(self, state: TrainState, train: tuple[Array, Array]) -> "CompiledEpoch":
        """One epoch of training on `train` (placed by `place`), compiled: the one place an epoch is compiled, for
        `fit`, every `bench` row that trains, and `profile`.

        `--loop scan`: the whole epoch, shuffle included, as one program. `--loop python`: the lesson's loop,
        a compiled shuffle, then the compiled step once per batch from Python.
        """
        x, y = train
        if self.config.loop == "scan":
            program = self.jit_epoch().lower(state.params, state.opt_state, state.key, x, y).compile()

            def run(state: TrainState, on_step: Callable[[int], Any] = lambda n: None):
                params, opt_state, key, metrics = program(state.params, state.opt_state, state.key, x, y)
                return TrainState(params, opt_state, key, state.epoch + 1), metrics

            return CompiledEpoch(run, (program,))
        batch = self.config.batch_size
        step = self.compile_step(state, (x[:batch], y[:batch]))
        plan = jax.jit(plan_epoch, static_argnums=(1, 2)).lower(state.key, len(x), batch).compile()

        def run(state: TrainState, on_step: Callable[[int], Any] = lambda n: None):
            params, opt_state, key, metrics = python_epoch(state, step, plan, x, y, use_dropout=self.use_dropout,
                                                           on_step=on_step)
            return TrainState(params, opt_state, key, state.epoch + 1), metrics

        return CompiledEpoch(run, (step, plan))

    def jit_epoch(self) -> Callable:
        """The whole epoch compiled as one program over the mesh, parameters and optimizer state donated: the
        one model's (`jit_model_epoch`), or mapped over several (`members.map_epoch`)."""
        from jaxintro.members import jit_epoch

        return jit_epoch(self)

    def epoch_fn(self) -> Callable:
        """The lesson's epoch with this trainer's step bound: `(params, opt_state, key, x_u8, y) -> ...`."""
        return functools.partial(train_epoch, step=self.step_fn(), batch_size=self.config.batch_size,
                                 use_dropout=self.use_dropout)

    def jit_model_epoch(self) -> Callable:
        """One model's epoch: on one device the plain epoch; on several, each batch split over them.

        Several devices split each batch (`shard_map` with `pmean`, or sharded `jit`); one device runs the
        plain epoch, with no collective.
        """
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from jaxintro.parallel import AXIS

        common = dict(batch_size=self.config.batch_size, use_dropout=self.use_dropout)
        if self.mesh.size == 1:
            # One device: the lesson's epoch as it is. Inside `shard_map` the `pmean` over one device would still
            # compile to an all-reduce that XLA keeps (replica_groups={{0}}), a collective with nothing to collect.
            return jax.jit(self.epoch_fn(), donate_argnums=(0, 1))
        if self.config.parallel == "sharding":
            epoch = functools.partial(train_epoch, step=self.step_fn(), **common,
                                      batch_sharding=NamedSharding(self.mesh, P(AXIS)))
            return jax.jit(epoch, donate_argnums=(0, 1))
        step = functools.partial(train_step, model=self.model, tx=self.tx, axis_name=AXIS)
        epoch = functools.partial(train_epoch, step=step, **common, axis_name=AXIS)
        replicated = P()
        sharded = jax.shard_map(epoch, mesh=self.mesh, in_specs=(replicated,) * 5, out_specs=(replicated,) * 4)
        return jax.jit(sharded, donate_argnums=(0, 1))

    def place(self, state: TrainState, dataset: Dataset) -> tuple[TrainState, tuple[Array, Array], tuple[Array, Array]]:
        """Put the state, the training set and the test set where training and evaluation read them: the one
        model's way (`place_model`), or spread over the members' devices (`members.place_members`)."""
        from jaxintro.members import place

        return place(self, state, dataset)

    def place_model(self, state: TrainState, dataset: Dataset) -> tuple[TrainState, tuple[Array, Array],
                                                                           tuple[Array, Array]]:
        """One model: every device of the mesh holds the parameters and the data, as uint8 (the step scales each
        batch). The lesson's loop (`--loop python`) leaves the training set on the host, where it slices each
        batch: a device copy would only cost memory.
        """
        from jaxintro.parallel import replicate

        train, test = (dataset.x_train, dataset.y_train), (dataset.x_test, dataset.y_test)
        if self.config.loop == "scan":
            carried = replicate((state.params, state.opt_state, state.key), self.mesh)
            return TrainState(*carried, state.epoch), replicate(train, self.mesh), replicate(test, self.mesh)
        return state, train, jax.device_put(test)  # the lesson's loop slices its batches from the host arrays

    def jit_eval(self) -> Callable:
        """Correct count and summed loss over a chunked set, compiled; with several members, one row per
        member and a last row for their ensemble (`members.jit_eval`)."""
        from jaxintro.members import jit_eval

        return jit_eval(self.config, self.model, self.mesh)


class EpochMetrics(NamedTuple):
    """One epoch's summary, as written to `metrics.jsonl`."""

    epoch: int
    loss: float
    train_accuracy: float
    test_accuracy: float
    test_loss: float
    learning_rate: float
    seconds: float
    max_grad_norm: float
    # Several members: the fields above are means over the members that have not diverged, these are per member.
    members: dict[str, list[float]] | None = None
    ensemble_test_accuracy: float | None = None

    def line(self, total_epochs: int, *, ensemble: bool = True) -> str:
        """The lesson's per-epoch line, plus the epoch's seconds (several members: mean +- std, and the ensemble
        unless `ensemble` is False: a sweep's members differ in hyper-parameters, and averaging them means nothing)."""
        width = len(str(total_epochs))
        if self.members is None:
            return (f"Epoch {self.epoch:{width + 1}d} | Loss: {self.loss:.4f} | Train Acc: {self.train_accuracy:.4f} | "
                    f"Test Acc: {self.test_accuracy:.4f} | lr {self.learning_rate:.2e} | {self.seconds:.2f}s")
        from jaxintro.members import mean_std

        def mean_and_std(name: str) -> str:
            return "{:.4f} ± {:.4f}".format(*mean_std(self.members[name]))

        lrs = self.members["learning_rate"]
        lr = f"{min(lrs):.2e}" if min(lrs) == max(lrs) else f"{min(lrs):.2e}..{max(lrs):.2e}"
        average = f" | Ensemble: {self.ensemble_test_accuracy:.4f}" if ensemble else ""
        return (f"Epoch {self.epoch:{width + 1}d} | Loss: {mean_and_std('loss')} | Train Acc: {mean_and_std('train_accuracy')} | "
                f"Test Acc: {mean_and_std('test_accuracy')}{average} | lr {lr} | {self.seconds:.2f}s")

    def as_row(self) -> dict[str, Any]:
        """The row of `metrics.jsonl` (a single run's has no member fields; a diverged member's values are null)."""
        from jaxintro.runs import json_safe

        return json_safe({name: value for name, value in self._asdict().items() if value is not None})


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


def check_finite(metrics: dict[str, np.ndarray], epoch: int, steps_per_epoch: int) -> None:
    """Raise on the first NaN/Inf loss (naming epoch and step); warn when a finite loss has exploded."""
    losses = metrics["loss"]
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        step = int(bad[0]) + 1
        raise TrainingDivergedError(_(
            "loss became {value} at epoch {epoch}, step {step} of {steps}; "
            "lower --lr, add --clip-norm 1.0, or use --optimizer adam"
        ).format(value=losses[bad[0]], epoch=epoch, step=step, steps=steps_per_epoch))
    peak = float(np.max(losses, initial=0.0))
    if peak > EXPLODED_LOSS:
        warnings.warn(
            _("epoch {epoch}: the loss reached {peak:.3g} (finite, but exploded); the learning rate is "
              "most likely too high: lower --lr or add --clip-norm 1.0").format(epoch=epoch, peak=peak),
            RuntimeWarning,
            stacklevel=2,
        )


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
) -> FitResult:
    """Train `config.epochs` epochs (from `state` when resuming, with the members `diverged_before` it), evaluating
    on the test set after each."""
    from tqdm import tqdm

    from jaxintro.members import check_epoch, epoch_row, shows_ensemble
    from jaxintro.parallel import to_host
    from jaxintro.runtime import release_free_memory

    trainer = Trainer.create(config, dataset)
    init_start = time.perf_counter()
    state, (x_train, y_train), (x_test, y_test) = trainer.place(state or trainer.init_state(), dataset)
    jax.block_until_ready(state)
    init_seconds = time.perf_counter() - init_start
    eval_fn = trainer.jit_eval()
    # A member that diverged before a resume stays diverged: the resumed run reports what the uninterrupted one does.
    diverged = set(diverged_before)

    epoch_program, compile_seconds, compile_cache = compile_timed(trainer, state, (x_train, y_train))

    history: list[EpochMetrics] = []
    step_metrics: list[dict[str, np.ndarray]] = []
    train_seconds = 0.0
    eval_seconds = 0.0
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
        check_epoch(metrics, epoch, trainer.steps_per_epoch, diverged)

        # The test set only: the training accuracy came with the epoch's own forward passes.
        eval_start = time.perf_counter()
        test_correct, test_loss = to_host(eval_fn(state.params, x_test, y_test))
        eval_seconds += time.perf_counter() - eval_start
        if epoch == epochs[0]:
            release_free_memory()  # the evaluation program was compiled just now
        row = epoch_row(
            epoch, metrics, test_correct, test_loss,
            learning_rate=float(trainer.schedule(epoch * trainer.steps_per_epoch - 1)), seconds=seconds,
            n_test=len(dataset.x_test), config=config, diverged=diverged,
        )
        history.append(row)
        step_metrics.append(metrics)
        with tqdm.external_write_mode():  # the line goes above the progress bar, not through it
            log(row.line(config.epochs, ensemble=shows_ensemble(config)))
        if on_epoch is not None:
            on_epoch(state, row)
        if should_stop(epoch) and epoch < config.epochs:  # asked after every epoch: it may be a collective
            stopped = True
            break
    bar.close()

    samples = len(history) * trainer.steps_per_epoch * config.batch_size * config.members
    return FitResult(state=state, history=history, step_metrics=step_metrics,
                     param_count=param_count(state.params) // config.members, train_seconds=train_seconds,
                     compile_seconds=compile_seconds,
                     samples_per_second=samples / train_seconds if train_seconds > 0 else math.nan,
                     compile_cache=compile_cache, eval_seconds=eval_seconds, init_seconds=init_seconds,
                     stopped_early=stopped)


def compile_timed(trainer: Trainer, state: TrainState, train: tuple[Array, Array]) -> tuple[CompiledEpoch, float, str]:
    """`Trainer.compile_epoch`, its seconds, and what the persistent cache did for it: "hit", "miss" or "off"
    (for the training program alone: the evaluation programs are counted apart)."""
    from jaxintro.runtime import compile_cache_counts, release_free_memory

    before = compile_cache_counts()
    start = time.perf_counter()
    program = trainer.compile_epoch(state, train)
    release_free_memory()  # before the first epoch, not after the run
    seconds = time.perf_counter() - start
    cache_on = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
    cache = "off" if not cache_on else "hit" if compile_cache_counts()["hits"] > before["hits"] else "miss"
    return program, seconds, cache


def model_row(
    epoch: int,
    metrics: dict[str, np.ndarray],
    test_correct: np.ndarray,
    test_loss: np.ndarray,
    *,
    learning_rate: float,
    seconds: float,
    n_test: int,
    config: TrainConfig,
) -> EpochMetrics:
    """One model's epoch summary from its per-step metrics and the test set's counts (several members:
    `members.epoch_row`).

    The loss and the training accuracy are the epoch's running means over its batches, as they were
    trained (dropout on, each batch scored just before its update), like Flax's MNIST example.
    """
    n_seen = metrics["correct"].shape[-1] * config.batch_size  # the epoch's steps, full batches only
    train_correct = np.sum(metrics["correct"], axis=-1)
    return EpochMetrics(epoch, float(np.mean(metrics["loss"])), int(train_correct) / n_seen,
                        int(test_correct) / n_test, float(test_loss) / n_test, learning_rate, seconds,
                        float(np.max(metrics["grad_norm"])))

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
