"""Will a run fit in memory? An estimate from the model's shapes, checked before anything is allocated or compiled.

Any run needs it, one model or many: `Trainer.create` asks `check_memory` with what its layout holds
(how many models, on how many devices, and how many copies of each share one memory: a model
replicated over N CPU devices is N copies in the host's memory; on accelerators each device has its own).
Using a trained run (`evaluate`, `predict`, `serve`, `experiment`) asks `check_use_memory` with the config its
checkpoint declares, before a single array of it is read: a run folder may come from someone else.
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import Sequence

from jaxintro.config import EVAL_CHUNK, TrainConfig
from jaxintro.errors import CheckpointError, ConfigError
from jaxintro.i18n import _, ngettext

# Of the memory JAX can use, how much a run may plan to fill: the rest is the interpreter, the
# libraries, the data and XLA's own buffers.
MEMORY_SHARE = 0.6
BYTES = 4  # float32
STATE_COPIES = 3  # a model's state: its parameters and Adam's two moments, each the parameters' size


def param_total(sizes: Sequence[int]) -> int:
    """The parameters of the MLP `sizes[0] -> ... -> sizes[-1]`: weights and biases."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def estimate_memory_bytes(config: TrainConfig, sizes: Sequence[int], num_train: int, devices: int = 1,
                          copies: int = 1) -> int:
    """What training `config.members` MLPs of `sizes` over `devices` needs, from shapes alone (nothing compiled).

    Per model: six copies of the parameters while a step runs (the parameters and the optimizer's two
    moments, donated to the step, beside the gradients, the update and the new values), the step's
    activations and their gradients, and the epoch's permutation. `copies`: how many times each model
    is held in this memory (one model replicated over N CPU devices: N). Once per device: the data, as
    uint8, and an evaluation chunk's inputs and activations. On a TPU v5e this came to 1.1 to 2.7
    times the chip's measured peak for 1 to 1,024 lesson MLPs (docs/accelerators.md: the chip holds three
    copies of the parameters, updating in place): an upper bound on every backend.
    """
    activations = sum(sizes)
    per_model = BYTES * (6 * param_total(sizes) + 3 * config.batch_size * activations + num_train)
    per_device = num_train * sizes[0] + BYTES * EVAL_CHUNK * (sizes[0] + activations)
    return config.members * copies * per_model + devices * per_device


def available_memory_bytes() -> int:
    """Memory a run could still take: the accelerator's free memory, or on a CPU, the host's (`host_memory_bytes`)."""
    import jax

    if jax.default_backend() != "cpu":  # the models live in device memory, not in the host's
        stats = jax.local_devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return host_memory_bytes()


def host_memory_bytes() -> int:
    """The host memory this process could still take: MemAvailable, less where a limit says so.

    A container's cgroup limit (`memory.max`) and the process's limits on its address space (`ulimit -v`,
    RLIMIT_AS) and its data (`ulimit -d`, RLIMIT_DATA) end a run as surely as the machine's size does: past
    them comes the kernel's OOM killer, or a failed allocation in the middle of an epoch.
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
    for limit, used in ((resource.RLIMIT_AS, "VmSize:"), (resource.RLIMIT_DATA, "VmData:")):
        soft, _hard = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            with contextlib.suppress(OSError, ValueError, StopIteration):
                taken = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                             if line.startswith(used))
                free = min(free, soft - taken)
    return max(free, 0)


def check_memory(config: TrainConfig, sizes: Sequence[int], num_train: int, *, devices: int = 1, copies: int = 1,
                 available: int | None = None) -> int:
    """Refuse, with the estimate and the fix, a run (one model or many) that would not fit in memory; return the need.

    CPU devices share the host's memory. Accelerators each have their own, but the first one evaluates
    every member, and a chunk's activations are most of a member's estimate, so the whole estimate is
    checked against the first device's free memory alone (a little cautious when spread).
    """
    need = estimate_memory_bytes(config, sizes, num_train, devices, copies)
    available = available_memory_bytes() if available is None else available
    if fits(need, available):
        return need
    fit = int(config.members * MEMORY_SHARE * available / need)
    if fit < 1:  # not even one model: fewer of them would not help
        raise ConfigError(_(
            "this model needs about {need:.1f} GiB to train ({params:,} parameters, with their gradients and "
            "optimizer state, a batch's activations and the data; estimated from its shapes), more than {share:.0%} "
            "of the {available:.1f} GiB available; use narrower layers (--hidden) or a smaller --batch-size"
        ).format(need=need / config.members / 2**30, params=param_total(sizes), share=MEMORY_SHARE,
                 available=available / 2**30))
    raise ConfigError(_(
        "{members} members need about {need:.1f} GiB ({each:.0f} MiB each, estimated from the model's shapes), "
        "more than {share:.0%} of the {available:.1f} GiB available; train at most about {fit} at once "
        "(fewer --seeds or a smaller --lr/--weight-decay grid)"
    ).format(members=config.members, need=need / 2**30, each=need / config.members / 2**20, share=MEMORY_SHARE,
             available=available / 2**30, fit=fit))


def fits(need: int, available: int) -> bool:
    """Whether `need` bytes fit in the share of `available` memory a run may take (`MEMORY_SHARE`)."""
    return need <= MEMORY_SHARE * available


def held_copy_fits(config: TrainConfig, sizes: Sequence[int], num_train: int, *, devices: int = 1, copies: int = 1,
                   available: int | None = None) -> bool:
    """Whether training's estimate and one more copy of every member's state (its parameters and the optimizer's two
    moments: the epoch `train --save-every` holds until a later one is known finite) fit where `check_memory` looks."""
    held = BYTES * STATE_COPIES * param_total(sizes) * config.members * copies
    need = estimate_memory_bytes(config, sizes, num_train, devices, copies) + held
    return fits(need, available_memory_bytes() if available is None else available)


def estimate_use_bytes(config: TrainConfig, sizes: Sequence[int]) -> int:
    """What using a trained run of `config.members` MLPs of `sizes` needs: each member's parameters twice (restored,
    then placed as the members used), and an evaluation chunk's inputs and activations for every member."""
    return config.members * BYTES * (2 * param_total(sizes) + EVAL_CHUNK * sum(sizes))


def check_use_memory(run_dir: Path, config: TrainConfig, sizes: Sequence[int], *, available: int | None = None) -> int:
    """Refuse, with the estimate, a trained run whose declared shapes would not fit in memory; return the need."""
    need = estimate_use_bytes(config, sizes)
    available = available_memory_bytes() if available is None else available
    if need <= MEMORY_SHARE * available:
        return need
    raise CheckpointError(ngettext(
        "{run_dir}: its checkpoint declares an MLP of sizes {sizes} ({params:,} parameters), which needs about "
        "{need:.1f} GiB to use, more than {share:.0%} of the {available:.1f} GiB available; nothing of it was read. Use "
        "it on a machine with more memory, or retrain it smaller",
        "{run_dir}: its checkpoint declares {members} MLPs of sizes {sizes} ({params:,} parameters each), which need "
        "about {need:.1f} GiB to use, more than {share:.0%} of the {available:.1f} GiB available; nothing of it was "
        "read. Use it on a machine with more memory, or retrain it smaller", config.members,
    ).format(run_dir=run_dir, members=config.members, sizes=",".join(map(str, sizes)), params=param_total(sizes),
             need=need / 2**30, share=MEMORY_SHARE, available=available / 2**30))
