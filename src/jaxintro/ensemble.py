"""Many models in one program: members stacked on a leading axis, trained by `jax.vmap` over whole epochs.

The lesson's idea one level up: write the training of one model, and `vmap` gives you N of them.
A member is a seed (and, in a sweep, a learning rate and a weight decay). Member k draws its init,
shuffles and dropout from its own seed exactly as the single run `--seed k` does, so it *is* that
run, computed side by side with the others; the uint8 data is shared, never copied per member.
Here live the pure parts: the grid of members, the ensemble as a model, the memory estimate, and
the summaries (mean +- std per setting).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaxintro.config import EVAL_CHUNK, TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.i18n import _
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
    valid = jnp.all(log_probs < jnp.inf, axis=-1)  # (members, batch): False for NaN and +inf
    safe = jnp.where(valid[..., None], log_probs, -jnp.inf)  # the left-out member's gradient is 0, not NaN * 0
    count = jnp.maximum(jnp.sum(valid, 0), 1)
    return jax.nn.logsumexp(safe, axis=0) - jnp.log(count)[:, None]


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


def member_log_probs(model: Model, params: Any, x: Array) -> Array:
    """Each member's log-probabilities for the same images, `(members, batch, classes)`."""
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
    """The setting with the highest mean test accuracy (diverged settings last)."""
    return max(settings, key=lambda s: s.mean if math.isfinite(s.mean) else -math.inf)


def members_diverged(params: Any, accuracies: Sequence[float | None]) -> list[int]:
    """The members that diverged: their parameters are not all finite, or training recorded no accuracy for them."""
    leaves = [np.asarray(leaf).reshape(len(accuracies), -1) for leaf in jax.tree.leaves(params)]
    finite = np.all([np.all(np.isfinite(leaf), axis=1) for leaf in leaves], axis=0)
    return [k for k, (ok, acc) in enumerate(zip(finite, accuracies))
            if not ok or acc is None or not math.isfinite(acc)]


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
