"""Many models as one layer: everything that depends on how many models a run trains lives here.

The lesson's idea one level up: write the training of one model, and JAX gives you N of them. A
member is a seed (and, in a sweep, a learning rate and a weight decay). Member k draws its init,
shuffles and dropout from its own seed exactly as the single run `--seed k` does, so it *is* that
run, computed side by side with the others; the uint8 data is shared, never copied per member.

The rest of jaxintro asks this module and does not branch on the member count itself:
- before JAX starts: `check_config`, `cpu_devices_wanted`, `refuse_processes`;
- the engine (`train.Trainer`): `make_run_mesh`, `init_members`, `jit_epoch` (`map_epoch`: members
  spread over a `members` mesh, `lax.map` or `vmap` groups on each device), `place`, `jit_eval`,
  `check_epoch`, `epoch_row`, and the memory estimate (`check_memory`);
- the report: `header`, `curves_title`, `summary_fields`, `accuracy_text`, `print_table`;
- a trained run: `use_run` (a sweep through its best setting, never a diverged member),
  `usage_note`, `run_kind` and its headline number.
JAX is imported inside the functions that need it, so `jaxintro runs` and `--help` start without it.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import numpy as np

from jaxintro.config import CPU_MEMBER_GROUP, EVAL_CHUNK, TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.i18n import _, ngettext

if TYPE_CHECKING:  # signatures only: JAX loads when a function that computes is called
    from jax import Array

    from jaxintro.models import Model

# Of the memory JAX can use, how much a run may plan to fill: the rest is the interpreter, the
# libraries, the data and XLA's own buffers.
MEMORY_SHARE = 0.6
BYTES = 4  # float32


class Member(NamedTuple):
    """One model of a multi-member run: its seed and its hyper-parameters."""

    seed: int
    lr: float
    weight_decay: float


def member_grid(config: TrainConfig) -> list[Member]:
    """Every member, setting by setting (learning rate, then weight decay), `config.seeds` seeds each."""
    lrs = config.lr_grid or (config.lr,)
    decays = config.weight_decay_grid or (config.weight_decay,)
    return [Member(config.seed + k, lr, wd) for lr in lrs for wd in decays for k in range(config.seeds)]


def average_probabilities(log_probs: Array) -> Array:
    """The log of the members' averaged probabilities, `(members, batch, classes) -> (batch, classes)`.

    A member whose log-probabilities for an image are NaN or +inf (its training diverged) is left out
    of that image's average, so one bad learning rate in a sweep does not erase the others' ensemble.
    The choice is made image by image, so it does not depend on how images are chunked. The average
    is taken in log space (`logsumexp` - log count): probabilities below e^-87 would underflow to 0
    in float32, and the log of their mean to -inf, exactly for the confident mistakes.
    """
    import jax
    import jax.numpy as jnp

    valid = jnp.all(log_probs < jnp.inf, axis=-1)  # (members, batch): False for NaN and +inf
    safe = jnp.where(valid[..., None], log_probs, -jnp.inf)  # the left-out member's gradient is 0, not NaN * 0
    count = jnp.maximum(jnp.sum(valid, 0), 1)
    return jax.nn.logsumexp(safe, axis=0) - jnp.log(count)[:, None]


def ensemble_model(model: Model) -> Model:
    """The members as one model: its log-probabilities are the log of their averaged softmax probabilities.

    `apply(stacked_params, x, key)` runs every member on the same images (vmapped over the parameters only).
    """

    from jaxintro.models import Model

    def apply(params, x, key=None):
        return average_probabilities(member_log_probs(model, params, x))

    return Model(f"ensemble of {model.name}", model.sizes, _no_init, apply)


def members_and_ensemble(model: Model) -> Model:
    """Every member and their ensemble from one forward pass: `apply` gives `(members + 1, batch, classes)`.

    Rows `0..members-1` are the members' log-probabilities, the last row the ensemble's, so one
    `count_correct` scores them all after each epoch without running the members twice.
    """

    import jax.numpy as jnp

    from jaxintro.models import Model

    def apply(params, x, key=None):
        log_probs = member_log_probs(model, params, x)
        return jnp.concatenate([log_probs, average_probabilities(log_probs)[None]])

    return Model(f"members and ensemble of {model.name}", model.sizes, _no_init, apply)


def member_log_probs(model: Model, params: Any, x: Array) -> Array:
    """Each member's log-probabilities for the same images, `(members, batch, classes)`."""
    import jax

    return jax.vmap(lambda p: jax.nn.log_softmax(model.apply(p, x, None)))(params)


def _no_init(key: Array) -> Any:
    raise TypeError("an ensemble is built from trained members, not initialised")


def estimate_memory_bytes(config: TrainConfig, sizes: Sequence[int], num_train: int, devices: int = 1) -> int:
    """What training `config.members` models spread over `devices` needs, from shapes alone (before anything compiles).

    Per member: parameters, gradients, the optimizer's two moments and the update (five copies),
    twice over because the epoch's inputs are donated while its outputs are written; the step's
    activations and their gradients; an evaluation chunk's activations. Once per device: the data,
    as uint8. An upper bound: members train in groups (`--member-group`), so only a group's
    activations live at once.
    """
    params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    activations = sum(sizes)
    per_member = BYTES * (10 * params + 3 * config.batch_size * activations + 2 * EVAL_CHUNK * activations)
    per_member += BYTES * num_train  # the permutation of every epoch
    return config.members * per_member + devices * num_train * sizes[0]


def available_memory_bytes() -> int:
    """Memory a run could still take: the accelerator's free memory, or on a CPU, the host's (see `host_memory_bytes`)."""
    import jax

    if jax.default_backend() != "cpu":  # the models live in device memory, not in the host's
        stats = jax.local_devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return host_memory_bytes()


def host_memory_bytes() -> int:
    """The host memory this process could still take: MemAvailable, less where a limit says so.

    A container's cgroup limit (`memory.max`) and the process's address-space limit (`ulimit -v`,
    RLIMIT_AS) end a run as surely as the machine's size does: past them comes the kernel's OOM
    killer, or a failed allocation in the middle of an epoch.
    """
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError, IndexError):
        free = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemAvailable:"))
    with contextlib.suppress(OSError, ValueError):  # cgroup v2: "max", or a byte count
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            free = min(free, int(limit) - int(used))
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        with contextlib.suppress(OSError, ValueError, StopIteration):
            mapped = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                          if line.startswith("VmSize:"))
            free = min(free, soft - mapped)
    return max(free, 0)


def check_memory(config: TrainConfig, sizes: Sequence[int], num_train: int, available: int | None = None,
                 devices: int = 1) -> int:
    """Refuse, with the estimate and the fix, a run (one model or many) that would not fit in memory; return the estimate.

    CPU devices share the host's memory. Accelerators each have their own, but the first one evaluates
    every member, and a chunk's activations are most of a member's estimate, so the whole estimate is
    checked against the first device's free memory alone (a little cautious when spread).
    """
    need = estimate_memory_bytes(config, sizes, num_train, devices)
    available = available_memory_bytes() if available is None else available
    if need > MEMORY_SHARE * available and config.members == 1:
        params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
        raise ConfigError(_(
            "this model needs about {need:.1f} GiB to train ({params:,} parameters, with their gradients and "
            "optimizer state, a batch's activations and the data; estimated from its shapes), more than {share:.0%} "
            "of the {available:.1f} GiB available; use narrower layers (--hidden) or a smaller --batch-size"
        ).format(need=need / 2**30, params=params, share=MEMORY_SHARE, available=available / 2**30))
    if need > MEMORY_SHARE * available:
        fit = max(int(config.members * MEMORY_SHARE * available / need), 0)
        raise ConfigError(_(
            "{members} members need about {need:.1f} GiB ({each:.0f} MiB each, estimated from the model's shapes), "
            "more than {share:.0%} of the {available:.1f} GiB available; train at most about {fit} at once "
            "(fewer --seeds or a smaller --lr/--weight-decay grid)"
        ).format(members=config.members, need=need / 2**30, each=need / config.members / 2**20, share=MEMORY_SHARE,
                 available=available / 2**30, fit=fit))
    return need


def mean_std(values: Sequence[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for one value) over the finite values (NaN if none)."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    if finite.size == 0:
        return math.nan, math.nan
    return float(finite.mean()), float(finite.std(ddof=1)) if finite.size > 1 else 0.0


class Setting(NamedTuple):
    """One point of a sweep's grid, summarised over its seeds."""

    lr: float
    weight_decay: float
    accuracies: list[float]  # per seed; NaN for a member that diverged
    mean: float
    std: float

    @property
    def diverged(self) -> int:
        """How many of its members diverged."""
        return sum(not math.isfinite(a) for a in self.accuracies)


def summarize_settings(members: Sequence[Member], accuracies: Sequence[float]) -> list[Setting]:
    """Group the members' final test accuracies by (learning rate, weight decay), in grid order."""
    groups: dict[tuple[float, float], list[float]] = {}
    for member, acc in zip(members, accuracies):
        groups.setdefault((member.lr, member.weight_decay), []).append(float(acc))
    return [Setting(lr, wd, accs, *mean_std(accs)) for (lr, wd), accs in groups.items()]


def best_setting(settings: Sequence[Setting]) -> Setting:
    """The setting with the highest mean test accuracy among those none of whose seeds diverged (a mean over the
    survivors of a setting that diverged would reward it); only when every setting lost a seed, the highest mean
    over survivors. Ties go to the setting listed first (the grid's order: --lr, then --weight-decay)."""
    return max(settings, key=lambda s: (s.diverged == 0, s.mean if math.isfinite(s.mean) else -math.inf))


def members_diverged(params: Any, accuracies: Sequence[float | None]) -> list[int]:
    """The members that diverged: their parameters are not all finite, or training recorded no accuracy for them."""
    import jax

    leaves = [np.asarray(leaf).reshape(len(accuracies), -1) for leaf in jax.tree.leaves(params)]
    finite = np.all([np.all(np.isfinite(leaf), axis=1) for leaf in leaves], axis=0)
    return [k for k, (ok, acc) in enumerate(zip(finite, accuracies))
            if not ok or acc is None or not math.isfinite(acc)]


def diverged_in(row: dict[str, Any]) -> list[int]:
    """The members a `metrics.jsonl` row reports as diverged (a null accuracy); none for a single run's row."""
    return [k for k, accuracy in enumerate(row.get("members", {}).get("test_accuracy", [])) if accuracy is None]


def parse_setting(text: str) -> tuple[float, float | None]:
    """`--setting lr=3e-4` or `lr=3e-4,wd=1e-4`: the learning rate and (None: any) the weight decay."""
    values: dict[str, float] = {}
    for part in text.split(","):
        name, _equals, value = part.strip().partition("=")
        try:
            if name not in ("lr", "wd") or name in values:
                raise ValueError(name)
            values[name] = float(value)
        except ValueError:
            raise ConfigError(_("--setting must read lr=VALUE or lr=VALUE,wd=VALUE (e.g. lr=3e-4); got {text}")
                              .format(text=repr(text))) from None
    if "lr" not in values:
        raise ConfigError(_("--setting names no learning rate; e.g. --setting lr=3e-4"))
    return values["lr"], values.get("wd")


class Choice(NamedTuple):
    """Which members a run is used through: their indices, and the sweep's setting they share (or None)."""

    used: list[int]
    setting: Setting | None
    diverged: list[int]  # every member that diverged
    left_out: int  # how many of them belong with `used` (in a sweep, to its setting), yet cannot be used


def choose_members(config: TrainConfig, accuracies: Sequence[float | None], diverged: Sequence[int],
                   setting: str | None = None) -> Choice:
    """The members a run predicts with: every member that trained, or in a sweep one setting's (default the best).

    Averaging models trained with different hyper-parameters is no ensemble anyone wants: a sweep picks
    a setting, and its seeds are averaged. A diverged member is never used.
    """
    members = member_grid(config)
    if setting is not None and not config.sweep:
        raise ConfigError(_("--setting chooses one setting of a sweep; this run is not a sweep: drop --setting"))
    chosen = None
    if config.sweep:
        settings = summarize_settings(members, [math.nan if a is None else a for a in accuracies])
        if setting is None:
            chosen = best_setting(settings)
        else:
            lr, wd = parse_setting(setting)
            matches = [s for s in settings if math.isclose(s.lr, lr, rel_tol=1e-6)
                       and (wd is None or math.isclose(s.weight_decay, wd, rel_tol=1e-6, abs_tol=1e-12))]
            if len(matches) != 1:
                grid = ", ".join(setting_name(config, s) for s in settings)
                raise ConfigError(_("--setting {setting} is not one of this sweep's settings: {grid}").format(
                    setting=setting, grid=grid))
            chosen = matches[0]
    used = [k for k, m in enumerate(members) if k not in diverged
            and (chosen is None or (m.lr, m.weight_decay) == (chosen.lr, chosen.weight_decay))]
    if not used and chosen is not None:
        raise ConfigError(_("every model of the setting {setting} diverged, so there is nothing to predict with; "
                            "choose another with --setting").format(setting=setting_name(config, chosen)))
    if not used:
        raise ConfigError(_("every member of this run diverged, so there is nothing to predict with; retrain it "
                            "with a lower --lr"))
    left_out = [k for k in diverged if chosen is None or (members[k].lr, members[k].weight_decay) ==
                (chosen.lr, chosen.weight_decay)]
    return Choice(used, chosen, list(diverged), len(left_out))


def ensemble_accuracy(model: Model, params: Any, used: Sequence[int], x_u8: Array, y: Array) -> float:
    """Test accuracy of the ensemble of the members `used` (one member: that model's own)."""
    import jax
    import jax.numpy as jnp

    from jaxintro.train import jit_count_correct

    index = np.asarray(used)
    chosen = jax.tree.map(lambda leaf: jax.device_get(leaf)[index], params)
    correct, _loss = jit_count_correct(ensemble_model(model))(chosen, jnp.asarray(x_u8), jnp.asarray(y))
    return int(correct) / len(y)


def headline_accuracy(config: TrainConfig, row: dict[str, Any]) -> float | None:
    """A run's one test accuracy, from its newest `metrics.jsonl` row, as `train`, `runs` and the page show it.

    One model: its accuracy. Several seeds: their mean (diverged members left out). A sweep: the mean
    of its best setting's seeds, the setting it is used through.
    """
    if not config.sweep or "members" not in row:
        return row.get("test_accuracy")
    accuracies = [math.nan if a is None else a for a in row["members"]["test_accuracy"]]
    best = best_setting(summarize_settings(member_grid(config), accuracies))
    return best.mean if math.isfinite(best.mean) else None


def setting_name(config: TrainConfig, setting: Setting) -> str:
    """`lr=0.001` (and `,wd=0.0001` with adamw, the only optimizer that decays weights): how `--setting` names it."""
    name = f"lr={setting.lr:g}"
    return name + f",wd={setting.weight_decay:g}" if config.optimizer == "adamw" else name


# ---------------------------------------------------------------- before JAX starts


def check_config(config: TrainConfig) -> None:
    """The config's rules about members (called by `TrainConfig.validate`), each a one-line error."""
    from jaxintro.config import PARALLEL, check_batch_split

    if config.sweep and config.members < 2:
        # One setting and one seed is a plain run: `train` says so better than a table of one row.
        raise ConfigError(_("a sweep compares several models: give two values or more (--lr 1e-3,3e-3) or "
                            "--seeds 2; for one model use `jaxintro train`"))
    if config.members == 1:
        check_batch_split(config.batch_size, config.devices)  # one model: the devices split its batch
        return
    check_member_split(config.members, config.devices)  # several: the devices split the members
    if config.parallel != PARALLEL[0]:
        raise ConfigError(_("--parallel {parallel} splits one model's batch over devices; several members "
                            "(--seeds > 1, or a sweep) are spread over them whole: drop --parallel").format(
            parallel=config.parallel))
    if config.loop != "scan":
        raise ConfigError(_("several members (--seeds > 1, or a sweep) need --loop scan: they are one compiled "
                            "program per epoch"))


def check_member_split(count: int, devices: int) -> None:
    """Members spread over devices in equal shares: each device runs the same program on its own."""
    if count % devices:
        raise ConfigError(_("{members} members do not split evenly over --devices {devices}; give a number of "
                            "devices that divides {members}, or drop --devices").format(members=count,
                                                                                        devices=devices))


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
    """Before JAX starts: the CPU devices to create, `--devices`, or for several members one per core they fill."""
    from jaxintro.parallel import usable_cores

    return config.devices if config.members == 1 else spread_over(config, usable_cores())


# ---------------------------------------------------------------- the engine's member axis


def member_devices(config: TrainConfig) -> int:
    """Once JAX runs: the devices the members spread over, of this process's (an accelerator keeps them on one
    device unless told: it vmaps them all there)."""
    import jax

    return spread_over(config, len(jax.devices()) if jax.default_backend() == "cpu" else 1)


def make_run_mesh(config: TrainConfig) -> Any:
    """The run's mesh: one model's `data` axis (its devices split each batch), or the members' `members` axis."""
    from jaxintro.config import check_batch_split
    from jaxintro.parallel import AXIS, MEMBERS, make_mesh

    if config.members > 1:
        return make_mesh(member_devices(config), MEMBERS)
    mesh = make_mesh(config.devices)
    check_batch_split(config.batch_size, mesh.shape[AXIS])  # with several processes, every device counts
    return mesh


def group_size(config: TrainConfig, devices: int = 1) -> int:
    """How many members one `vmap` trains at a time on each of `devices`: `--member-group`, else all of a
    device's members on an accelerator (to fill it) and `CPU_MEMBER_GROUP` on a CPU (compute-bound: see config)."""
    import jax

    share = config.members // devices
    if config.member_group:
        return min(config.member_group, share)
    return share if jax.default_backend() != "cpu" else min(share, CPU_MEMBER_GROUP)


def init_members(config: TrainConfig, init_one: Callable[[int], tuple]) -> tuple:
    """`(params, opt_state, key)`: one model's from its seed, or every member's, stacked on a leading axis.

    Each member by the single run's own init, then stacked. Not jitted, like the single run's: XLA's
    fusions would round a few initial weights one ulp apart, and member k's start would no longer be bit
    for bit the run `--seed k`'s. Nor vmapped: op by op, a vmap compiles a batched program per op, where
    a loop reuses the single run's programs after the first member. In a sweep each optimizer state then
    gets its member's learning rate and weight decay.
    """
    if config.members == 1:
        return init_one(config.seed)
    import jax
    import jax.numpy as jnp

    from jaxintro.optim import with_hyperparams

    members = member_grid(config)
    params, opt_state, key = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[init_one(m.seed) for m in members])
    if config.sweep:
        opt_state = with_hyperparams(opt_state, jnp.asarray([m.lr for m in members], jnp.float32),
                                     jnp.asarray([m.weight_decay for m in members], jnp.float32))
    return params, opt_state, key


def abstract_carry(count: int, params: Any, opt_state: Any) -> tuple:
    """The shapes a checkpoint restores into: one model's, or with a leading member axis on every leaf."""
    import jax

    if count == 1:
        return params, opt_state, jax.random.key(0)
    stacked = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct((count, *leaf.shape), leaf.dtype), (params, opt_state))
    return (*stacked, jax.random.split(jax.random.key(0), count))


def jit_epoch(trainer: Any) -> Callable:
    """The trainer's compiled epoch: the one model's (`Trainer.jit_model_epoch`), or mapped over the members."""
    if trainer.config.members == 1:
        return trainer.jit_model_epoch()
    return map_epoch(trainer.epoch_fn(), trainer.config, trainer.mesh)


def map_epoch(epoch: Callable, config: TrainConfig, mesh: Any) -> Callable:
    """Whole epochs mapped over the members' parameters, optimizer states and keys; compiled, state donated.

    Each device trains its share alone, side by side with the others (no collective); the uint8 data is
    shared by the members of a device, neither copied nor moved per member.
    """
    import jax
    from jax.sharding import PartitionSpec as P

    from jaxintro.parallel import MEMBERS

    group = group_size(config, mesh.shape[MEMBERS])

    def members_epoch(params, opt_state, key, x_u8, y):
        # Each device's own members. lax.map with batch_size: `vmap` over `group` members at a time,
        # the groups in turn. A group of 1 is a plain lax.map, no `vmap`: each member runs the single
        # run's own program.
        return jax.lax.map(lambda member: epoch(*member, x_u8, y), (params, opt_state, key),
                           batch_size=group if group > 1 else None)

    spread, shared = P(MEMBERS), P()
    members_epoch = jax.shard_map(members_epoch, mesh=mesh, in_specs=(spread,) * 3 + (shared,) * 2,
                                  out_specs=(spread,) * 4)
    return jax.jit(members_epoch, donate_argnums=(0, 1))


def place(trainer: Any, state: Any, dataset: Any) -> tuple:
    """The state and the data where training reads them: the one model's way (`Trainer.place_model`), or each
    device holding its share of the members and the training data, the first device the test set (it
    evaluates them all, `jit_eval`)."""
    if trainer.config.members == 1:
        return trainer.place_model(state, dataset)
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxintro.parallel import MEMBERS, replicate

    carried = jax.device_put((state.params, state.opt_state, state.key), NamedSharding(trainer.mesh, P(MEMBERS)))
    train, test = (dataset.x_train, dataset.y_train), (dataset.x_test, dataset.y_test)
    return (type(state)(*carried, state.epoch), replicate(train, trainer.mesh),
            jax.device_put(test, trainer.mesh.devices.flat[0]))


def jit_eval(config: TrainConfig, model: "Model", mesh: Any) -> Callable:
    """Correct count and summed loss over a chunked set, compiled: one model's, or one row per member and a
    last row for their ensemble (the average of their probabilities).

    Spread members are first gathered on the first device (one small copy of the parameters per
    epoch), so every member is scored by one and the same program, wherever it trained.
    """
    import jax

    from jaxintro.train import jit_count_correct

    if config.members == 1:
        return jit_count_correct(model)
    count = jit_count_correct(members_and_ensemble(model))
    evaluator = mesh.devices.flat[0]
    return lambda params, x, y: count(jax.device_put(params, evaluator), x, y)


def check_epoch(metrics: dict[str, np.ndarray], epoch: int, steps_per_epoch: int, diverged: set[int]) -> None:
    """After an epoch: one model must stay finite; of several, each member whose loss became NaN/Inf is
    warned about once and left out (all of them: an error, as for one model)."""
    from jaxintro.train import check_finite

    losses = metrics["loss"]
    if losses.ndim == 1:  # one model's steps
        check_finite(metrics, epoch, steps_per_epoch)
        return
    bad = [int(m) for m in np.flatnonzero(~np.all(np.isfinite(losses), axis=1))]
    if len(bad) == len(losses):
        check_finite({"loss": losses[bad[0]]}, epoch, steps_per_epoch)
    for m in sorted(set(bad) - diverged):
        step = int(np.flatnonzero(~np.isfinite(losses[m]))[0]) + 1
        warnings.warn(_("member {member} diverged at epoch {epoch}, step {step}; it is reported as NaN and left out "
                        "of the means and the ensemble").format(member=m, epoch=epoch, step=step),
                      RuntimeWarning, stacklevel=3)
        diverged.add(m)


def epoch_row(epoch: int, metrics: dict[str, np.ndarray], test_correct: np.ndarray, test_loss: np.ndarray, *,
              learning_rate: float, seconds: float, n_test: int, config: TrainConfig,
              diverged: set[int] = frozenset()) -> Any:  # type: ignore[assignment]
    """The epoch's row of `metrics.jsonl`: one model's (`train.model_row`), or several members' means with each
    member's numbers (a diverged member's NaN, not a misleading accuracy) and the ensemble's accuracy."""
    from jaxintro.train import EpochMetrics, model_row

    if config.members == 1:
        return model_row(epoch, metrics, test_correct, test_loss, learning_rate=learning_rate, seconds=seconds,
                         n_test=n_test, config=config)
    n_seen = metrics["correct"].shape[-1] * config.batch_size  # the epoch's steps, full batches only
    # A schedule is linear in its peak: member k's rate is the schedule's at `lr`, scaled to its own.
    lrs = [learning_rate * m.lr / config.lr for m in member_grid(config)]
    per_member = {
        "loss": np.mean(metrics["loss"], axis=1),
        "train_accuracy": np.sum(metrics["correct"], axis=-1) / n_seen,
        "test_accuracy": np.asarray(test_correct[:-1]) / n_test,
        "test_loss": np.asarray(test_loss[:-1]) / n_test,
        "max_grad_norm": np.max(metrics["grad_norm"], axis=1),
    }
    for name, values in per_member.items():
        values = values.astype(np.float64)
        values[list(diverged)] = np.nan
        per_member[name] = values
    means = {name: float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for name, v in per_member.items()}
    return EpochMetrics(epoch, means["loss"], means["train_accuracy"], means["test_accuracy"], means["test_loss"],
                        max(lrs), seconds, means["max_grad_norm"],
                        members={**{k: [float(x) for x in v] for k, v in per_member.items()}, "learning_rate": lrs},
                        ensemble_test_accuracy=int(test_correct[-1]) / n_test)


def shows_ensemble(config: TrainConfig) -> bool:
    """Whether the per-epoch line shows the members' ensemble: not a sweep's, whose members differ in
    hyper-parameters (averaging them means nothing)."""
    return not config.sweep


# ---------------------------------------------------------------- what a run's report says about its members


def header(config: TrainConfig, facts: dict[str, Any]) -> tuple[str, int]:
    """The line that opens a run (what trains on what), and the devices its members spread over (one model: 1)."""
    if config.members == 1:
        return _("Training {model} MLP {layers} on {dataset} ({train} train / {test} test, from {source}); "
                 "loop={loop}; run folder {run_dir}").format(**facts), 1
    import jax

    spread = member_devices(config)
    platform = jax.default_backend().upper()
    where = (_("all on one {platform} device").format(platform=platform) if spread == 1 else
             ngettext("spread over {devices} {platform} device", "spread over {devices} {platform} devices",
                      spread).format(devices=spread, platform=platform))
    return _("Training {members} {model} MLPs ({grid}) {layers} on {dataset} ({train} train / {test} test, "
             "from {source}); {where}; loop={loop}; run folder {run_dir}").format(
        members=config.members, grid=describe_members(config), where=where, **facts), spread


def curves_title(config: TrainConfig, dataset: Any) -> str:
    """`curves.png`'s title (several members: each drawn faint, their mean bold)."""
    if config.members == 1:
        return _("{model} MLP on {dataset}").format(model=config.model, dataset=dataset.name)
    return _("{members} x {model} MLP on {dataset} (each faint, mean bold)").format(
        members=config.members, model=config.model, dataset=dataset.name)


def summary_fields(config: TrainConfig, last: dict[str, Any], result: Any, dataset: Any, run_dir: Path, *,
                   spread: int, primary: bool, clock: dict[str, float]) -> dict[str, Any]:
    """The summary's fields about members (none for one model); a sweep's run also draws `sweep.png` and scores the
    ensemble it is used through, its best setting's seeds (timed into `clock["eval_after"]`)."""
    if config.members == 1:
        return {}
    import time

    fields = {**members_summary(config, last, result.samples_per_second), "member_devices": spread}
    if config.sweep:
        start = time.perf_counter()
        fields["ensemble_test_accuracy"] = best_setting_ensemble(config, last, result.state.params, dataset)
        clock["eval_after"] = time.perf_counter() - start
        if primary:
            from jaxintro.faults import run_write
            from jaxintro.plots import plot_sweep

            title = ngettext("{model} MLP on {dataset}, {epochs} epoch", "{model} MLP on {dataset}, {epochs} epochs",
                             last["epoch"]).format(model=config.model, dataset=dataset.name, epochs=last["epoch"])
            with run_write("sweep.png", run_dir):
                fields["sweep_png"] = str(plot_sweep(sweep_settings(config, last), run_dir / "sweep.png",
                                                     title=title))
    return fields


def accuracy_text(config: TrainConfig, summary: dict[str, Any]) -> str:
    """The run's test accuracy as the Done line says it: one model's, the mean of several, a sweep's best setting."""
    if config.sweep:
        best = summary["best"]
        return ngettext("{mean:.2f} ± {std:.2f}% at the best setting (lr {lr:g})",
                        "{mean:.2f} ± {std:.2f}% at the best setting (lr {lr:g}; its {seeds} seeds' ensemble "
                        "{ensemble:.2f}%)", config.seeds).format(
            mean=100 * best["test_accuracy"], std=100 * best["test_accuracy_std"], lr=best["lr"], seeds=config.seeds,
            ensemble=100 * summary["ensemble_test_accuracy"])
    if config.members > 1:
        return _("{mean:.2f} ± {std:.2f}% (mean ± std of {members} members; their ensemble {ensemble:.2f}%)").format(
            mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], members=config.members,
            ensemble=100 * summary["ensemble_test_accuracy"])
    return f"{100 * summary['test_accuracy']:.2f}%"


def describe_members(config: TrainConfig) -> str:
    """`seeds 0..7`, or a sweep's grid in words."""
    if config.seeds == 1:
        seeds = _("seed {seed}").format(seed=config.seed)
    else:
        seeds = _("seeds {first}..{last}").format(first=config.seed, last=config.seed + config.seeds - 1)
    if not config.sweep:
        return seeds
    lrs = ", ".join(f"{v:g}" for v in config.lr_grid or (config.lr,))
    if not config.weight_decay_grid:
        return _("lr {lrs}; {seeds} each").format(lrs=lrs, seeds=seeds)
    return _("lr {lrs} x weight decay {decays}; {seeds} each").format(
        lrs=lrs, decays=", ".join(f"{v:g}" for v in config.weight_decay_grid), seeds=seeds)


def best_setting_ensemble(config: TrainConfig, last: dict[str, Any], params: Any, dataset: Any) -> float:
    """Test accuracy of the ensemble of the best setting's seeds that trained (one seed: that model's own)."""
    from jaxintro.models import model_for

    accuracies = last["members"]["test_accuracy"]
    choice = choose_members(config, accuracies, [k for k, a in enumerate(accuracies) if a is None])
    if len(choice.used) == 1:
        return accuracies[choice.used[0]]
    model = model_for(config, dataset.num_features, dataset.num_classes)
    return ensemble_accuracy(model, params, choice.used, dataset.x_test, dataset.y_test)


def sweep_settings(config: TrainConfig, last: dict[str, Any]) -> list:
    """The sweep's settings, each summarised over its seeds, from the last epoch's row."""
    accuracies = [math.nan if a is None else a for a in last["members"]["test_accuracy"]]
    return summarize_settings(member_grid(config), accuracies)


def members_summary(config: TrainConfig, last: dict[str, Any], samples_per_second: float) -> dict[str, Any]:
    """The JSON fields of a multi-member run: mean +- std, each member, the ensemble (and a sweep's settings)."""
    per = last["members"]
    mean, std = mean_std(per["test_accuracy"])
    # Only adamw decays weights: another optimizer's members and settings have no weight decay (null), not a value.
    decays = config.optimizer == "adamw"
    members = [{"seed": m.seed, "lr": m.lr, "weight_decay": m.weight_decay if decays else None,
                "test_accuracy": per["test_accuracy"][k],
                "train_accuracy": per["train_accuracy"][k], "final_loss": per["loss"][k], "test_loss": per["test_loss"][k]}
               for k, m in enumerate(member_grid(config))]
    summary: dict[str, Any] = {
        "test_accuracy": mean, "test_accuracy_std": std, "members": members,
        "ensemble_test_accuracy": last["ensemble_test_accuracy"], "member_count": config.members,
        "samples_per_second_per_model": samples_per_second / config.members,
        "train_accuracy": mean_std(per["train_accuracy"])[0], "final_loss": mean_std(per["loss"])[0],
    }
    if config.sweep:
        settings = sweep_settings(config, last)
        summary["settings"] = [{"lr": s.lr, "weight_decay": s.weight_decay if decays else None, "test_accuracy": s.mean,
                                "test_accuracy_std": s.std, "diverged": s.diverged} for s in settings]
        best = best_setting(settings)
        summary["best"] = {"lr": best.lr, "weight_decay": best.weight_decay if decays else None,
                           "test_accuracy": best.mean,
                           "test_accuracy_std": best.std}
        # A sweep's headline is its best setting (as the summary line says), not a mean across settings.
        summary["test_accuracy"], summary["test_accuracy_std"] = best.mean, best.std
    from jaxintro.runs import json_safe

    return json_safe(summary)  # a setting whose members all diverged has a NaN mean: null in the JSON


def print_table(config: TrainConfig, summary: dict[str, Any]) -> None:
    """The final table of a run of several models: every member, then (a sweep) every setting and the best one;
    nothing for one model."""
    if config.members == 1:
        return

    def pct(value: float | None) -> str:
        return _("diverged") if value is None or not math.isfinite(value) else f"{100 * value:6.2f}%"

    def decay(value: float) -> str:  # only adamw decays the weights
        return f"{value:.2g}" if config.optimizer == "adamw" else "-"

    # Column headings, each translated alone; a column widens to fit a longer translation.
    heads = [_("member"), _("seed"), "lr", "wd", _("test acc"), _("train acc"), _("loss")]
    widths = [max(width, len(head)) for head, width in zip(heads, (6, 6, 8, 8, 9, 9, 8))]
    print(" ".join(f"{head:>{width}}" for head, width in zip(heads, widths)))
    for k, m in enumerate(summary["members"]):
        loss = "-" if m["final_loss"] is None else f"{m['final_loss']:.4f}"
        cells = [k, m["seed"], f"{m['lr']:.2g}", decay(m["weight_decay"]), pct(m["test_accuracy"]),
                 pct(m["train_accuracy"]), loss]
        print(" ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)))
    if not config.sweep:
        print(_("Ensemble (averaged probabilities of the members): {accuracy} test accuracy").format(
            accuracy=pct(summary["ensemble_test_accuracy"]).strip()))
        return
    spread = ngettext("test acc (mean ± std over {n} seed)", "test acc (mean ± std over {n} seeds)",
                      config.seeds).format(n=config.seeds)
    col = max(40, len(spread))  # a longer translation widens the column
    print(f"{'lr':>8} {'wd':>8} {spread:>{col}}")
    for s in summary["settings"]:
        cell = _("diverged") if s["test_accuracy"] is None or not math.isfinite(s["test_accuracy"]) else (
            f"{100 * s['test_accuracy']:.2f} ± {100 * s['test_accuracy_std']:.2f}%")
        survivors = config.seeds - s["diverged"]
        note = "  " + ngettext("({n} diverged; the mean is of the other {m})", "({n} diverged; the mean is of the "
                               "other {m})", s["diverged"]).format(n=s["diverged"], m=survivors) \
            if s["diverged"] and survivors else "  " + _("(every seed diverged)") if s["diverged"] else ""
        print(f"{s['lr']:>8.2g} {decay(s['weight_decay']):>8} {cell:>{col}}{note}")
    best = summary["best"]
    if config.optimizer == "adamw":
        line = _("Best: lr {lr:g}, weight decay {weight_decay:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    else:  # only adamw decays the weights: naming a weight decay would mislead
        line = _("Best: lr {lr:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    print(line.format(lr=best["lr"], weight_decay=best["weight_decay"], mean=100 * best["test_accuracy"],
                      std=100 * best["test_accuracy_std"], path=summary["sweep_png"]))
    if config.seeds > 1:  # what `predict`, `serve` and `evaluate` use: the best setting's seeds, averaged
        print(_("Ensemble of the best setting's {seeds} seeds (what predict, serve and evaluate use): {accuracy} "
                "test accuracy").format(seeds=config.seeds, accuracy=pct(summary["ensemble_test_accuracy"]).strip()))
    verdict = compare_with_lesson(summary["settings"], best) if config.seeds > 1 else None  # one seed: no spread
    if verdict:
        print(verdict)


def compare_with_lesson(settings: list[dict[str, Any]], best: dict[str, Any]) -> str | None:
    """Whether the best setting beats the lesson's learning rate by more than the seeds' spread (None if not swept)."""
    lesson_lr = TrainConfig().lr
    lesson = [s for s in settings if s["lr"] == lesson_lr and s["weight_decay"] == best["weight_decay"]]
    if not lesson or lesson[0]["test_accuracy"] is None or not math.isfinite(lesson[0]["test_accuracy"]):
        return None
    base = lesson[0]
    gap = 100 * (best["test_accuracy"] - base["test_accuracy"])
    noise = 100 * math.hypot(best["test_accuracy_std"], base["test_accuracy_std"])
    if best["lr"] == lesson_lr:
        return _("The lesson's lr {lr:g} is the best of this grid.").format(lr=lesson_lr)
    if gap > noise:
        return _("lr {best:g} beats the lesson's {lr:g} by {gap:.2f} points, more than the seeds' spread "
                 "({noise:.2f}).").format(best=best["lr"], lr=lesson_lr, gap=gap, noise=noise)
    return _("No setting beats the lesson's lr {lr:g} by more than the seeds' spread: the best is {gap:.2f} points "
             "higher, within {noise:.2f}.").format(lr=lesson_lr, gap=gap, noise=noise)


# ---------------------------------------------------------------- a trained run's members


def use_run(config: TrainConfig, model: "Model", params: Any, meta: dict[str, Any], setting: str | None) -> dict:
    """What a restored run predicts with: `model` and `params` to apply, and for several members the one member's
    model, every member's parameters and the `Choice` of those used (a sweep: one setting's; never a diverged one)."""
    if config.members == 1:
        if setting is not None:
            raise ConfigError(_("--setting chooses one setting of a sweep; this run is not a sweep: drop --setting"))
        return {"model": model, "params": params}
    import jax

    last = meta["metrics"][-1]["members"] if meta.get("metrics") else {}
    accuracies = last.get("test_accuracy", [None] * config.members)
    choice = choose_members(config, accuracies, members_diverged(params, accuracies), setting)
    used = np.asarray(choice.used)
    chosen = jax.tree.map(lambda leaf: leaf[used] if len(used) > 1 else leaf[used[0]], params)
    return {"model": ensemble_model(model) if len(used) > 1 else model, "params": chosen, "member_model": model,
            "all_params": params, "choice": choice}


def usage_note(run: Any) -> str | None:
    """Which of a run's models answer, in words (`predict`, `serve`, `grads --run` say it); None for one model."""
    return run.describe_use() if run.config.members > 1 else None


def member_accuracies(run: Any, x_u8: np.ndarray, y: np.ndarray) -> list[float]:
    """Each member's own test accuracy (a diverged member scores nothing: NaN, not the accuracy of class 0)."""
    import jax.numpy as jnp

    from jaxintro.train import jit_count_correct

    correct = jit_count_correct(members_and_ensemble(run.member_model))
    counts, _losses = correct(run.all_params, jnp.asarray(x_u8), jnp.asarray(y))
    # The last row is the ensemble of all members.
    return [math.nan if k in run.choice.diverged else int(c) / len(y) for k, c in enumerate(np.asarray(counts)[:-1])]


def evaluation_lines(run: Any, report: dict[str, Any], run_dir: Path, dataset: Any, *, chosen: bool) -> list[str]:
    """`jaxintro evaluate`'s opening lines: one model's accuracy, or each member's (a diverged one says so), their
    mean, and what the run predicts with (a sweep: the setting, with the figures `sweep` printed for it)."""
    if run.config.members == 1:
        return [ngettext("{run_dir}: {model} MLP after {epochs} epoch on {dataset}",
                         "{run_dir}: {model} MLP after {epochs} epochs on {dataset}", run.epoch).format(
                    run_dir=run_dir, model=run.config.model, epochs=run.epoch, dataset=dataset.name),
                _("Test accuracy: {accuracy:.2f}% ({count} images)").format(
                    accuracy=100 * report["test_accuracy"], count=len(dataset.x_test))]
    lines = [ngettext("{run_dir}: {members} {model} MLPs after {epochs} epoch on {dataset}",
                      "{run_dir}: {members} {model} MLPs after {epochs} epochs on {dataset}", run.epoch).format(
        run_dir=run_dir, members=run.config.members, model=run.config.model, epochs=run.epoch, dataset=dataset.name)]
    accuracies = report["member_test_accuracy"]
    for k, (member, acc) in enumerate(zip(member_grid(run.config), accuracies)):
        score = _("diverged") if not math.isfinite(acc) else f"{100 * acc:6.2f}%"
        lines.append(_("  member {k:>3} (seed {seed}, lr {lr:g}): {accuracy}").format(
            k=k, seed=member.seed, lr=member.lr, accuracy=score))
    mean, std = mean_std(accuracies)
    lines.append(_("Members: {mean:.2f} ± {std:.2f}% (mean ± std of those that trained)").format(
        mean=100 * mean, std=100 * std))
    setting = run.choice.setting
    if setting is not None:  # a sweep: the setting it is used through, with the figures `sweep` printed for it
        lines.append(_("Setting used: {setting} ({how}): its seeds {mean:.2f} ± {std:.2f}%").format(
            setting=setting_name(run.config, setting),
            how=_("chosen with --setting") if chosen else _("the best; choose another with --setting"),
            mean=100 * setting.mean, std=100 * setting.std))
    lines.append(_("Test accuracy of {what}: {accuracy:.2f}% ({count} images; the per-class figures and the confusion "
                   "matrix below are its)").format(what=run.describe_use(), accuracy=100 * report["test_accuracy"],
                                                   count=len(dataset.x_test)))
    return lines


def run_kind(config: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """What kind of run a folder holds (one model, seeds, a sweep), how many diverged, and its headline accuracy."""
    from jaxintro.runs import RESOLVED_DATASET

    try:
        train_config = TrainConfig.from_json({k: v for k, v in config.items() if k != RESOLVED_DATASET})
    except (ConfigError, TypeError, ValueError):
        train_config = TrainConfig()  # a config of another version: read it as a single run
    kind = "sweep" if train_config.sweep else "seeds" if train_config.members > 1 else "single"
    members = (row or {}).get("members", {}).get("test_accuracy", [])
    return {"kind": kind, "member_count": train_config.members, "diverged": sum(a is None for a in members),
            "test_accuracy": headline_accuracy(train_config, row) if row else None}


def kind_text(info: dict[str, Any]) -> str:
    """`1 model`, `8 seeds`, `sweep: 6 models` (and how many diverged), as `jaxintro runs` prints it."""
    count = info.get("member_count", 1)
    if info.get("kind") == "sweep":
        text = ngettext("sweep: {n} model", "sweep: {n} models", count).format(n=count)
    elif info.get("kind") == "seeds":
        text = ngettext("{n} seed", "{n} seeds", count).format(n=count)
    else:
        text = _("1 model")
    if info.get("diverged"):
        text += ", " + ngettext("{n} diverged", "{n} diverged", info["diverged"]).format(n=info["diverged"])
    return text
