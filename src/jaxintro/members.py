"""Many models in one program (`--seeds`, `sweep`): their layout on the devices, their ensemble, and which of
them a trained run is used through.

The lesson's idea one level up: write the training of one model, and JAX gives you N of them. A
member is a seed (and, in a sweep, a learning rate and a weight decay: `grid.member_grid`). Member k
draws its init, shuffles and dropout from its own seed exactly as the single run `--seed k` does, so
it *is* that run, computed side by side with the others; the uint8 data is shared, never copied per
member.

- before JAX starts its devices: `cpu_devices_wanted`, `refuse_processes`;
- the `Members` layout (`train.Trainer` picks it for several members; `layout.OneModel` is the other):
  the `members` mesh, `init_members`, the epoch mapped over them (`map_epoch`: `lax.map`, or `vmap`
  in groups), spread placement, and every member scored with their ensemble after each epoch;
- the ensemble as a model (`ensemble_model`, log-sum-exp of their probabilities);
- a trained run: `use_run` (a sweep through its best setting, never a diverged member).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array

from jaxintro.config import CPU_MEMBER_GROUP, TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.grid import Choice, choose_members, diverged_in, judged_by, member_grid, setting_name
from jaxintro.i18n import _
from jaxintro.layout import bound_epoch, bound_plan, bound_step, jitted_draw
from jaxintro.lesson import step_key
from jaxintro.models.base import Model
from jaxintro.optim import hyperparams, init_with_inputs, with_hyperparams
from jaxintro.parallel import MEMBERS, make_mesh, replicate, usable_cores
from jaxintro.record import EpochMetrics, Scores, check_members_finite, headline_over, members_row
from jaxintro.scoring import jit_count_correct

# ---------------------------------------------------------------- before JAX starts its devices


def refuse_processes(config: TrainConfig, processes: int) -> None:
    """Several members train in one process: its devices hold them all (several processes would each hold a part)."""
    if config.members > 1 and processes > 1:
        raise ConfigError(_("several members (--seeds > 1, or a sweep) train in one process, spread over its "
                            "devices; drop --coordinator, --num-processes and --process-id"))


def spread_over(config: TrainConfig, available: int) -> int:
    """The devices a run's members spread over: `--devices`, else the most of `available` that split them evenly."""
    if config.devices > 1:
        return config.devices
    return max(d for d in range(1, min(config.members, available) + 1) if config.members % d == 0)


def cpu_devices_wanted(config: TrainConfig) -> int:
    """Before JAX starts its devices: the CPU devices to create, `--devices`, or for several members one per core
    they fill."""
    return config.devices if config.members == 1 else spread_over(config, usable_cores())


def member_devices(config: TrainConfig) -> int:
    """Once JAX runs: the devices the members spread over, of this process's (an accelerator keeps them on one
    device unless told: it vmaps them all there)."""
    return spread_over(config, len(jax.devices()) if jax.default_backend() == "cpu" else 1)


def group_size(config: TrainConfig, devices: int = 1) -> int:
    """How many members one `vmap` trains at a time on each of `devices`: `--member-group`, else all of a
    device's members on an accelerator (to fill it) and `CPU_MEMBER_GROUP` on a CPU (compute-bound: see config)."""
    share = config.members // devices
    if config.member_group:
        return min(config.member_group, share)
    return share if jax.default_backend() != "cpu" else min(share, CPU_MEMBER_GROUP)


# ---------------------------------------------------------------- the members layout


def init_members(config: TrainConfig, model: Model) -> tuple:
    """`(params, opt_state, key)` of every member, stacked on a leading axis: the weights of every member's seed
    drawn in turn by one program (`layout.jitted_draw`), then the optimizer's states.

    Member k starts from the run `--seed k`'s bits (the He draw keeps its two roundings under jit,
    `models.base.untruncated_he_normal`). In a sweep each optimizer state then gets its member's learning rate and
    weight decay.
    """
    members = member_grid(config)
    params, key = jitted_draw(model)(np.asarray([m.seed for m in members], np.uint32))
    opt_state = jax.jit(jax.vmap(init_with_inputs(config), in_axes=(0, None)))(params, hyperparams(config))
    if config.sweep:
        opt_state = with_hyperparams(opt_state, jnp.asarray([m.lr for m in members], jnp.float32),
                                     jnp.asarray([m.weight_decay for m in members], jnp.float32))
    return params, opt_state, key


def abstract_carry(count: int, params: Any, opt_state: Any) -> tuple:
    """The shapes a checkpoint restores into: one model's, or with a leading member axis on every leaf."""
    if count == 1:
        return params, opt_state, jax.random.key(0)
    stacked = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct((count, *leaf.shape), leaf.dtype), (params, opt_state))
    return (*stacked, jax.random.split(jax.random.key(0), count))


def map_members(fn: Callable, config: TrainConfig, mesh: Any, *, name: str, spread: int, shared: int = 0) -> Callable:
    """`fn` for every member: its first `spread` arguments have a leading member axis, the last `shared` are the same
    for all (the data). Each device takes its share of the members (`shard_map` along `members`: no collective) and
    runs them `group_size` at a time, the groups in turn (`lax.map` with a batch size: a `vmap` of each group). A
    group of one is a plain `lax.map`, no `vmap`: each member runs its single run's own program, bit for bit. `name`
    names the program in compile logs and profiles (`jit_members_epoch`)."""
    group = group_size(config, mesh.shape[MEMBERS])

    def each_devices_members(*args):
        members, common = args[:spread], args[spread:]
        return jax.lax.map(lambda member: fn(*member, *common), members, batch_size=group if group > 1 else None)

    each_devices_members.__name__ = name
    return jax.shard_map(each_devices_members, mesh=mesh, in_specs=(P(MEMBERS),) * spread + (P(),) * shared,
                         out_specs=P(MEMBERS))


def map_epoch(epoch: Callable, config: TrainConfig, mesh: Any) -> Callable:
    """Whole epochs mapped over the members' parameters, optimizer states and plans (`map_members`); compiled, state
    donated. The uint8 data is shared by the members of a device, neither copied nor moved per member."""
    return jax.jit(map_members(epoch, config, mesh, name="members_epoch", spread=4, shared=2), donate_argnums=(0, 1))


def map_plan(plan: Callable, config: TrainConfig, mesh: Any) -> Callable:
    """The members' shuffles (`plan` of each one's key), on the devices and in the groups `map_epoch` trains them in
    (`map_members`): a group of one draws its single run's shuffle exactly, whatever the PRNG (a vmap over keys is
    exact for threefry, JAX's default, not for `rbg`)."""
    return map_members(plan, config, mesh, name="members_plan", spread=1)


class Members:
    """Several models: each device of the `members` mesh trains its share of them whole, with no collective."""

    def __init__(self, config: TrainConfig, model: Model, tx: optax.GradientTransformation):
        self.config, self.model, self.tx = config, model, tx
        self.mesh = make_mesh(member_devices(config), MEMBERS)
        self.copies = 1  # each member is held once, on its own device

    def init(self) -> tuple:
        """Every member as its single run starts (`init_members`)."""
        return init_members(self.config, self.model)

    def cost_steps(self, state: Any, batch: tuple, compile_step: Callable) -> list[tuple[Any, int]]:
        """The compiled steps whose cost analyses add up to one step of every member, each with how many times it
        runs, as `map_members` runs them: in groups of one, a member's single-run step (`compile_step`) once a member;
        in larger groups, one group's step vmapped, once a full group, and the remainder's. The members' epoch
        program would not do: XLA's cost analysis counts the body of a loop (the map over groups) once."""
        group = group_size(self.config, self.mesh.shape[MEMBERS])

        carry = (state.params, state.opt_state, state.key)
        if group == 1:
            params, opt_state, key = self.member(carry, 0)
            return [(compile_step(state._replace(params=params, opt_state=opt_state, key=key), batch),
                     self.config.members)]
        step, use_dropout = bound_step(self.config, self.model, self.tx), self.config.use_dropout

        def group_step(params: Any, opt_state: Any, batch: tuple, key: Array) -> tuple:
            return step(params, opt_state, batch, step_key(key, 0, use_dropout))

        def compiled(size: int) -> Any:  # a group of the first `size` members
            params, opt_state, keys = jax.tree.map(lambda leaf: leaf[:size], carry)
            batches = tuple(np.broadcast_to(a, (size, *a.shape)) for a in batch)
            return jax.jit(jax.vmap(group_step)).lower(params, opt_state, batches, keys).compile()

        full, rest = divmod(self.config.members, group)
        return [(compiled(group), full)] + ([(compiled(rest), 1)] if rest else [])

    def plan_fn(self, num_examples: int) -> Callable:
        """Every member's shuffle, each from its own key, as its single run draws it (`bound_plan`, `map_plan`)."""
        return map_plan(bound_plan(num_examples, self.config.batch_size), self.config, self.mesh)

    def jit_epoch(self) -> Callable:
        """The lesson's epoch mapped over the members (`map_epoch`)."""
        return map_epoch(bound_epoch(self.config, self.model, self.tx), self.config, self.mesh)

    def place(self, state: Any, dataset: Any) -> tuple[Any, tuple, tuple]:
        """Each device holds its share of the members and the training data; the first device the test set (it
        evaluates them all, `jit_eval`)."""
        params, opt_state, key = jax.device_put((state.params, state.opt_state, state.key),
                                                NamedSharding(self.mesh, P(MEMBERS)))
        train = (dataset.x_train, dataset.y_train)
        return (state._replace(params=params, opt_state=opt_state, key=key), replicate(train, self.mesh),
                self.place_eval((dataset.x_test, dataset.y_test)))

    def place_eval(self, images: tuple[Any, Any]) -> tuple[Any, Any]:
        """A set scored after every epoch (the test set, a validation split): on the first device, which scores
        every member."""
        return jax.device_put(images, self.mesh.devices.flat[0])

    def member(self, tree: Any, k: int) -> Any:
        """Member `k`'s leaves of a state tree (every leaf stacked on a leading member axis)."""
        return jax.tree.map(lambda leaf: leaf[k], tree)

    def jit_eval(self) -> Callable:
        """`score(params, x, y, diverged)`: one row per member and a last row for their ensemble (correct count and
        summed loss), compiled; the members in `diverged` are scored as NaN weights, so the ensemble leaves them out.

        Spread members are first gathered on the first device (one small copy of the parameters per
        epoch), so every member is scored by one and the same program, wherever it trained.
        """
        count = jit_count_correct(members_and_ensemble(self.model))
        evaluator = self.mesh.devices.flat[0]

        def score(params: Any, x: Array, y: Array, diverged: Sequence[int] = ()) -> tuple[Array, Array]:
            params = jax.device_put(params, evaluator)
            if diverged:  # weights past an exploded loss mean nothing, even while finite: never in the ensemble
                trained = np.ones(self.config.members, bool)
                trained[list(diverged)] = False
                params = jax.tree.map(lambda leaf: jnp.where(trained.reshape(-1, *[1] * (leaf.ndim - 1)), leaf, jnp.nan),
                                      params)
            return count(params, x, y)

        return score

    def check_epoch(self, metrics: dict[str, np.ndarray], unseen_loss: np.ndarray, epoch: int, steps: int,
                    diverged: set[int], *, held_out: bool = False) -> None:
        """A member that diverged is warned about once and left out; all of them is an error."""
        check_members_finite(metrics, unseen_loss, epoch, steps, diverged, held_out=held_out)

    def epoch_row(self, epoch: int, metrics: dict[str, np.ndarray], test: Scores | None, *, learning_rate: float,
                  seconds: float, diverged: set[int], validation: Scores | None = None) -> EpochMetrics:
        """The members' row: their means, each member's numbers, the ensemble's accuracy."""
        # A schedule is linear in its peak: member k's rate is the schedule's at `lr`, scaled to its own.
        lrs = [learning_rate * m.lr / self.config.lr for m in member_grid(self.config)]
        row = members_row(epoch, metrics, test, learning_rates=lrs, seconds=seconds,
                          batch_size=self.config.batch_size, diverged=diverged, validation=validation)
        return headline_over(row, self.used_at(row).used) if self.config.sweep else row

    def epoch_line(self, row: EpochMetrics) -> str:
        """The epoch's line: the members' mean +- std and their ensemble; a sweep's, its best setting's seeds."""
        if not self.config.sweep:
            return row.line(self.config.epochs)
        choice = self.used_at(row)
        label = _("best: {setting}").format(setting=setting_name(self.config, choice.setting))
        return row.line(self.config.epochs, used=choice.used, label=label)

    def used_at(self, row: EpochMetrics) -> Choice:
        """The members the run would be used through after this epoch (a sweep: the epoch's best setting's seeds)."""
        return choose_members(self.config, row.members[judged_by(row.members)], diverged_in({"members": row.members}))


# ---------------------------------------------------------------- the ensemble


def average_probabilities(log_probs: Array) -> Array:
    """The log of the members' averaged probabilities, `(members, batch, classes) -> (batch, classes)`.

    A member whose log-probabilities for an image are NaN or +inf (its training diverged) is left out
    of that image's average, so one bad learning rate in a sweep does not erase the others' ensemble.
    The choice is made image by image, so it does not depend on how images are chunked. The average
    is taken in log space (`logsumexp` - log count): probabilities below e^-87 would underflow to 0
    in float32, and the log of their mean to -inf, exactly for the confident mistakes.
    """
    valid = jnp.all(log_probs < jnp.inf, axis=-1)  # (members, batch): False for NaN and +inf
    safe = jnp.where(valid[..., None], log_probs, -jnp.inf)  # the left-out member's gradient is 0, not NaN * 0
    count = jnp.maximum(jnp.sum(valid, 0), 1)
    return jax.nn.logsumexp(safe, axis=0) - jnp.log(count)[:, None]


def member_log_probs(model: Model, params: Any, x: Array) -> Array:
    """Each member's log-probabilities for the same images, `(members, batch, classes)`."""
    return jax.vmap(lambda p: jax.nn.log_softmax(model.apply(p, x, None)))(params)


def ensemble_model(model: Model) -> Model:
    """The members as one model: its log-probabilities are the log of their averaged softmax probabilities.

    `apply(stacked_params, x, key)` runs every member on the same images (vmapped over the parameters only).
    """

    def apply(params, x, key=None):
        return average_probabilities(member_log_probs(model, params, x))

    return Model(f"ensemble of {model.name}", model.sizes, _no_init, apply)


def members_and_ensemble(model: Model) -> Model:
    """Every member and their ensemble from one forward pass: `apply` gives `(members + 1, batch, classes)`.

    Rows `0..members-1` are the members' log-probabilities, the last row the ensemble's, so one
    `count_correct` scores them all after each epoch without running the members twice.
    """

    def apply(params, x, key=None):
        log_probs = member_log_probs(model, params, x)
        return jnp.concatenate([log_probs, average_probabilities(log_probs)[None]])

    return Model(f"members and ensemble of {model.name}", model.sizes, _no_init, apply)


def _no_init(key: Array) -> Any:
    raise TypeError("an ensemble is built from trained members, not initialised")


def ensemble_accuracy(model: Model, params: Any, used: Sequence[int], x_u8: Array, y: Array) -> float:
    """Test accuracy of the ensemble of the members `used` (one member: that model's own)."""
    index = np.asarray(used)
    chosen = jax.tree.map(lambda leaf: jax.device_get(leaf)[index], params)
    correct, _loss = jit_count_correct(ensemble_model(model))(chosen, jnp.asarray(x_u8), jnp.asarray(y))
    return int(correct) / len(y)


# ---------------------------------------------------------------- which members a trained run is used through


def members_diverged(params: Any, accuracies: Sequence[float | None]) -> list[int]:
    """The members that diverged: their parameters are not all finite, or training recorded no accuracy for them."""
    leaves = [np.asarray(leaf).reshape(len(accuracies), -1) for leaf in jax.tree.leaves(params)]
    finite = np.all([np.all(np.isfinite(leaf), axis=1) for leaf in leaves], axis=0)
    return [k for k, (ok, acc) in enumerate(zip(finite, accuracies))
            if not ok or acc is None or not np.isfinite(acc)]


def use_run(config: TrainConfig, model: Model, params: Any, meta: dict[str, Any], setting: str | None) -> dict:
    """What a restored run of several members predicts with: the ensemble model and the used members' parameters,
    the one member's model, every member's parameters and the `Choice` of those used (a sweep: one setting's;
    never a diverged one)."""
    last = meta["metrics"][-1].get("members") or {} if meta.get("metrics") else {}
    accuracies = last.get(judged_by(last))  # the held-out images' when the run has them: the test set chooses nothing
    if not (isinstance(accuracies, list) and len(accuracies) == config.members):  # the meta is input: one per member
        accuracies = [None] * config.members
    choice = choose_members(config, accuracies, members_diverged(params, accuracies), setting)
    used = np.asarray(choice.used)
    chosen = jax.tree.map(lambda leaf: leaf[used] if len(used) > 1 else leaf[used[0]], params)
    return {"model": ensemble_model(model) if len(used) > 1 else model, "params": chosen, "member_model": model,
            "all_params": params, "choice": choice}


def member_accuracies(member_model: Model, all_params: Any, diverged: Sequence[int], x_u8: np.ndarray,
                      y: np.ndarray) -> list[float]:
    """Each member's own test accuracy (a diverged member scores nothing: NaN, not the accuracy of class 0)."""
    correct = jit_count_correct(members_and_ensemble(member_model))
    counts, _losses = correct(all_params, jnp.asarray(x_u8), jnp.asarray(y))
    # The last row is the ensemble of all members.
    return [np.nan if k in diverged else int(c) / len(y) for k, c in enumerate(np.asarray(counts)[:-1])]
