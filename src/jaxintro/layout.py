"""How a run's models sit on its devices: the one-model layout, and what every layout provides.

`Trainer.create` picks a layout once: `OneModel` here (the `data` mesh; every device holds the
parameters and splits each batch, through `shard_map` with `pmean` or a sharded `jit`), or
`members.Members` (the `members` mesh; each device trains its share of the members whole). The
trainer calls its layout and the layout never calls back, but for `cost_steps`, which is handed the trainer's
`compile_step` (a model's single-run step, as one model and groups of one member run it): both are built from the
config, the model and the optimizer, and wrap the lesson's step and epoch (`jaxintro.lesson`) without changing them.

A layout has: `mesh`; `copies` (how many copies of each model one memory holds, for the memory
estimate); `init()`, `plan_fn(num_examples)`, `jit_epoch()`, `place(state, dataset)`, `jit_eval()`,
`check_epoch(metrics, epoch, steps, diverged)`, `epoch_row(...)` and `cost_steps(state, batch, compile_step)`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxintro.config import TrainConfig, check_batch_split
from jaxintro.lesson import plan_epoch, train_epoch, train_step
from jaxintro.models.base import Model
from jaxintro.optim import hyperparams, init_with_inputs
from jaxintro.parallel import AXIS, make_mesh, replicate
from jaxintro.record import EpochMetrics, Scores, check_finite, one_model_row
from jaxintro.scoring import jit_count_correct


def bound_step(config: TrainConfig, model: Model, tx: optax.GradientTransformation,
               axis_name: str | None = None) -> Callable:
    """The lesson's pure `train_step` with the model and optimizer bound (and the device axis it averages over),
    keeping the gradient's norm if the run records it."""
    return functools.partial(train_step, model=model, tx=tx, axis_name=axis_name,
                             record_grad_norm=config.record_grad_norm)


def jitted_draw(model: Model) -> Callable[[jax.Array], tuple]:
    """`seeds -> (params, key)`: a model's initial weights and the key its epochs split, from a uint32 seed (the
    single run's `split`), or from each seed of a vector in turn; one jitted program per model in a process.

    In turn (`lax.map`), not vmapped: each member's bits are then its single run's whatever the PRNG (a vmap over
    `rbg` keys draws others). The optimizer's state is left out: inside, its hyperparameters would be constants of
    the program, and a new `--lr` would compile it again. It is a small program of its own, the hyperparameters its
    inputs (`optim.init_with_inputs`).
    """
    # The PRNG is read when the draw is traced, and jit does not trace again when it changes: a key of the cache.
    return _draw_program(model, jax.config.jax_default_prng_impl)


@functools.cache  # keyed by the Model object: `models.model_for` gives one per description, so a run's twin hits
def _draw_program(model: Model, prng_impl: str) -> Callable[[jax.Array], tuple]:
    def draw(seed: jax.Array) -> tuple:
        init_key, key = jax.random.split(jax.random.key(seed))
        return model.init(init_key), key

    return jax.jit(lambda seeds: draw(seeds) if seeds.ndim == 0 else jax.lax.map(draw, seeds))


def bound_plan(num_examples: int, batch_size: int) -> Callable:
    """The lesson's shuffle of `num_examples` images into batches: `key -> (next key, batches, dropout key)`."""
    return functools.partial(plan_epoch, num_examples=num_examples, batch_size=batch_size)


def compile_plan(plan: Callable, key: jax.Array) -> Any:
    """An epoch's shuffle (`bound_plan`, or every member's) compiled where `key` lives, its outputs left there: one
    small program per data size, batch and placement, which the persistent cache gives any model, width or rate."""
    return jax.jit(plan, out_shardings=placed(key)).lower(key).compile()


def placed(key: jax.Array) -> Any:
    """Where an array was put (`place`: its sharding), or None for one left wherever JAX runs (not committed)."""
    return key.sharding if key.committed else None


def bound_epoch(config: TrainConfig, model: Model, tx: optax.GradientTransformation) -> Callable:
    """The lesson's epoch with the step bound: `(params, opt_state, batches, dropout_key, x_u8, y) -> (params,
    opt_state, metrics)`."""
    return functools.partial(train_epoch, step=bound_step(config, model, tx), use_dropout=config.use_dropout)


def data_parallel_epoch(params, opt_state, batches, dropout_key, x_u8, y, *, step: Callable, use_dropout: bool):
    """The lesson's epoch inside `shard_map`: the same plan on every device, each taking its slice of every batch.

    On several devices each slice holds other examples, so each device folds its index into the dropout key.
    """
    devices = jax.lax.axis_size(AXIS)
    index = jax.lax.axis_index(AXIS)
    local = batches.shape[1] // devices
    batches = jax.lax.dynamic_slice_in_dim(batches, index * local, local, axis=1)
    if devices > 1:  # other examples on each device: other dropout masks
        dropout_key = jax.random.fold_in(dropout_key, index)
    return train_epoch(params, opt_state, batches, dropout_key, x_u8, y, step=step, use_dropout=use_dropout)


def laid_out(step: Callable, sharding: NamedSharding) -> Callable:
    """`step` on batches laid out across devices (`with_sharding_constraint`): XLA splits the work."""

    def step_on_sharded_batch(params, opt_state, batch, key):
        return step(params, opt_state, jax.lax.with_sharding_constraint(batch, sharding), key)

    return step_on_sharded_batch


def split_epoch(config: TrainConfig, model: Model, tx: optax.GradientTransformation, mesh: Any) -> Callable:
    """The epoch with every batch split over `mesh`'s devices (`shard_map` with `pmean`, or sharded `jit`), compiled,
    parameters and optimizer state donated."""
    if config.parallel == "sharding":
        step = laid_out(bound_step(config, model, tx), NamedSharding(mesh, P(AXIS)))
        return jax.jit(functools.partial(train_epoch, step=step, use_dropout=config.use_dropout), donate_argnums=(0, 1))
    step = bound_step(config, model, tx, AXIS)
    epoch = functools.partial(data_parallel_epoch, step=step, use_dropout=config.use_dropout)
    replicated = P()
    sharded = jax.shard_map(epoch, mesh=mesh, in_specs=(replicated,) * 6, out_specs=(replicated,) * 3)
    return jax.jit(sharded, donate_argnums=(0, 1))


class OneModel:
    """One model: every device of the `data` mesh holds the parameters and the data, and splits each batch."""

    def __init__(self, config: TrainConfig, model: Model, tx: optax.GradientTransformation):
        self.config, self.model, self.tx = config, model, tx
        self.mesh = make_mesh(config.devices)
        check_batch_split(config.batch_size, self.mesh.shape[AXIS])  # with several processes, every device counts
        # CPU devices share the host's memory: a model replicated over them is that many copies in it.
        self.copies = self.mesh.size if jax.default_backend() == "cpu" else 1

    def init(self) -> tuple:
        """`(params, opt_state, key)` of the run's seed: the weights by `jitted_draw`, then the optimizer's state."""
        params, key = jitted_draw(self.model)(np.uint32(self.config.seed))
        return params, jax.jit(init_with_inputs(self.config))(params, hyperparams(self.config)), key

    def cost_steps(self, state: Any, batch: tuple, compile_step: Callable) -> list[tuple[Any, int]]:
        """The step whose cost analysis is one step of the run: its own (`compile_step`), once."""
        return [(compile_step(state, batch), 1)]

    def plan_fn(self, num_examples: int) -> Callable:
        """The epoch's shuffle of the run's one key (`bound_plan`)."""
        return bound_plan(num_examples, self.config.batch_size)

    def jit_epoch(self) -> Callable:
        """The whole epoch compiled as one program, parameters and optimizer state donated.

        One device runs the lesson's epoch as it is. Several split each batch (`shard_map` with `pmean`,
        or sharded `jit`): inside `shard_map` the `pmean` over one device would still compile to an
        all-reduce that XLA keeps (replica_groups={{0}}), a collective with nothing to collect.
        """
        if self.mesh.size == 1:
            return jax.jit(bound_epoch(self.config, self.model, self.tx), donate_argnums=(0, 1))
        return split_epoch(self.config, self.model, self.tx, self.mesh)

    def place(self, state: Any, dataset: Any) -> tuple[Any, tuple, tuple]:
        """Every device of the mesh holds the parameters and the data, as uint8 (the step scales each batch).

        The lesson's loop (`--loop python`) leaves the training set on the host, where it slices each
        batch: a device copy would only cost memory.
        """
        train, test = (dataset.x_train, dataset.y_train), self.place_eval((dataset.x_test, dataset.y_test))
        if self.config.loop != "scan":
            return state, train, test
        params, opt_state, key = replicate((state.params, state.opt_state, state.key), self.mesh)
        return state._replace(params=params, opt_state=opt_state, key=key), replicate(train, self.mesh), test

    def place_eval(self, images: tuple[Any, Any]) -> tuple[Any, Any]:
        """A set scored after every epoch (the test set, a validation split), where `jit_eval` reads it."""
        return jax.device_put(images) if self.config.loop != "scan" else replicate(images, self.mesh)

    def member(self, tree: Any, k: int) -> Any:
        """Member `k`'s leaves of a state tree: one model is member 0, its own tree."""
        return tree

    def jit_eval(self) -> Callable:
        """`score(params, x, y, diverged)`: correct count and summed loss over a chunked set, compiled (one model
        never goes on diverged: `diverged` is always empty)."""
        count = jit_count_correct(self.model)
        return lambda params, x, y, diverged=(): count(params, x, y)

    def check_epoch(self, metrics: dict[str, np.ndarray], unseen_loss: np.ndarray, epoch: int, steps: int,
                    diverged: set[int], *, held_out: bool = False) -> None:
        """The model must not diverge (`record.first_divergence`, or a non-finite loss on the unseen images: the
        held-out ones, or the test set): that ends the run, there is nothing left to report on."""
        check_finite(metrics, float(unseen_loss), epoch, steps, held_out=held_out)

    def epoch_row(self, epoch: int, metrics: dict[str, np.ndarray], test: Scores | None, *, learning_rate: float,
                  seconds: float, diverged: set[int], validation: Scores | None = None) -> EpochMetrics:
        """The epoch's row of `metrics.jsonl`."""
        return one_model_row(epoch, metrics, test, learning_rate=learning_rate, seconds=seconds,
                             batch_size=self.config.batch_size, validation=validation)

    def epoch_line(self, row: EpochMetrics) -> str:
        """The lesson's per-epoch line."""
        return row.line(self.config.epochs)
