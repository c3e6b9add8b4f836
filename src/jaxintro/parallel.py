"""Data parallelism over a device mesh: `shard_map` with `lax.pmean`, or sharded `jit`; one or many processes.
Members (`--seeds N`, a sweep) spread over a mesh of their own, each device training its share.

The lesson's `pmap` is in maintenance mode; its modern forms are here. The mesh has one axis,
`data`. Parameters, optimizer state and the (small) dataset are replicated; each device takes its
slice of every global batch, so the math is that of one device on the whole batch:

- `shard_map`: the epoch runs per device; gradients are averaged with `lax.pmean` explicitly;
- `sharding`: plain `jit`; each batch is constrained to `P("data")` and XLA inserts the all-reduce.

With several processes (`jax.distributed`), the mesh spans every process's devices and each process
feeds and computes only its own devices' slices of every batch.

Members need no collective at all: the mesh's axis is `members`, every member-stacked leaf is split
along it, and each device runs its members' whole epochs alone. On a CPU the cores become devices:
two programs side by side keep both cores busier than one program's small matmuls split over them.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxintro.errors import ConfigError, JaxintroError
from jaxintro.i18n import _

AXIS = "data"
MEMBERS = "members"
DISTRIBUTED_TIMEOUT_S = 60
JOIN_GRACE_S = 10  # JAX's own joining bound lies this far past ours, so ours always speaks first
EXIT_NOT_JOINED = 2  # a peer that never joined: most often a mistake in one of the commands (docs/reliability.md)
SHARED_FOLDER_WAIT_S = 10  # how long a process waits to see process 0's token in the run folder
CPU_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # a container's CPU limit (cgroup v2), where there is one


def make_mesh(num_devices: int, axis: str = AXIS) -> Mesh:
    """A 1-D mesh named `axis` over `num_devices` devices (all processes' devices when distributed)."""
    devices = jax.devices()
    if jax.process_count() > 1:
        num_devices = len(devices)  # every device of every process takes part
    if num_devices > len(devices):
        raise ConfigError(_(
            "--devices {wanted} but JAX sees {seen} {platform} device(s); on a CPU, "
            "jaxintro creates them when --devices is given before JAX starts; elsewhere use at most {seen}"
        ).format(wanted=num_devices, seen=len(devices), platform=devices[0].platform))
    # Auto axes: under plain `jit` the compiler propagates the batch sharding and inserts the collectives.
    return jax.make_mesh((num_devices,), (axis,), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=devices[:num_devices])


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity mask, capped by a container's CPU quota (cgroup v2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:  # "max 100000" when unlimited, "200000 100000" for 2 CPUs
        quota, period = CPU_QUOTA.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cores


def host_device() -> jax.Device:
    """This process's first CPU device, where the run's initial weights are drawn (its first device of any kind
    if JAX was started without its CPU backend, `JAX_PLATFORMS=tpu`)."""
    try:
        return jax.local_devices(backend="cpu")[0]
    except RuntimeError:
        return jax.local_devices()[0]


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """The sharding of an array copied on every device of `mesh`."""
    return NamedSharding(mesh, P())


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place every array of `tree` on all devices of `mesh` (works across processes: each gives its full copy)."""
    sharding = replicated_sharding(mesh)

    def place(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return leaf  # already a global array (restored by every process)
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = place(jax.random.key_data(leaf))
            return jax.jit(lambda d: jax.random.wrap_key_data(d, impl=jax.random.key_impl(leaf)),
                           out_shardings=sharding)(data)
        if jax.process_count() == 1:
            return jax.device_put(leaf, sharding)
        return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))

    return jax.tree.map(place, tree)


def to_host(tree: Any) -> Any:
    """Fetch replicated arrays to NumPy from this process's first copy (also when other processes hold the rest)."""

    def fetch(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(leaf.addressable_data(0))
        return jax.device_get(leaf)

    return jax.tree.map(fetch, tree)


def check_coordinator(coordinator: str, num_processes: int, process_id: int) -> None:
    """Refuse a malformed address, a bad process id, or (for process 0) a port already taken."""
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ConfigError(_("--process-id must be in 0..{last}; got {process_id}").format(
            last=num_processes - 1, process_id=process_id))
    if coordinator == "auto":  # JAX derives the address from the scheduler's variables
        return
    host, _colon, port = coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(_("--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got {value}").format(
            value=repr(coordinator)))
    if process_id == 0 and _is_local(host):
        # The coordinator listens on PORT: say so plainly instead of a gRPC bind failure.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("" if host in ("0.0.0.0", "") else host, int(port)))
            except OSError:
                raise ConfigError(_("--coordinator port {port} is already in use on {host}; choose another port")
                                  .format(port=port, host=host)) from None


def distributed_timeout() -> int:
    """The bound, in seconds, on every multi-process wait (`JAXINTRO_DISTRIBUTED_TIMEOUT`, default 60)."""
    text = os.environ.get("JAXINTRO_DISTRIBUTED_TIMEOUT", str(DISTRIBUTED_TIMEOUT_S))
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(_("JAXINTRO_DISTRIBUTED_TIMEOUT must be a whole number of seconds >= 1; got {value}").format(
            value=repr(text)))
    return int(text)


def detect_cluster() -> tuple[str, int, int]:
    """For `--coordinator auto`: (coordinator, process count, this process's id) from a launcher's environment.

    SLURM (`srun`) and Open MPI (`mpirun`) are recognised by the variables JAX's own cluster detection
    reads, and the coordinator stays `auto`: JAX derives it. A Kubernetes indexed Job is recognised by
    `JOB_COMPLETION_INDEX` (set by Kubernetes) with `JAX_COORDINATOR_ADDRESS` and `JAX_NUM_PROCESSES`
    (set in the Job's manifest), which give the coordinator: JAX's own Kubernetes detection would need
    the `kubernetes` package and API permissions.
    """
    env = os.environ
    if "OMPI_MCA_orte_hnp_uri" in env:  # JAX checks Open MPI first; so do we
        return "auto", int(env["OMPI_COMM_WORLD_SIZE"]), int(env["OMPI_COMM_WORLD_RANK"])
    if all(name in env for name in ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
                                    "SLURM_LOCALID")):
        return "auto", int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"])
    if "JOB_COMPLETION_INDEX" in env and "JAX_COORDINATOR_ADDRESS" in env and "JAX_NUM_PROCESSES" in env:
        return env["JAX_COORDINATOR_ADDRESS"], int(env["JAX_NUM_PROCESSES"]), int(env["JOB_COMPLETION_INDEX"])
    raise ConfigError(_(
        "--coordinator auto found no SLURM step (run it under srun), Open MPI job (mpirun) or Kubernetes indexed "
        "Job (JOB_COMPLETION_INDEX, JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES) in the environment; "
        "or pass --coordinator HOST:PORT --num-processes N --process-id I (see docs/parallel.md)"
    ))


def initialize_distributed(coordinator: str, num_processes: int, process_id: int,
                           on_give_up: Callable[[], None] = lambda: None) -> None:
    """Join a multi-process run (`jax.distributed`, gloo collectives on CPU) with every wait bounded.

    `coordinator="auto"` lets JAX read SLURM's or Open MPI's variables itself; an address is used as
    given, with JAX's detection off. The same bound (`distributed_timeout()`) caps joining, a
    collective that never completes (XLA's CPU collective time-out, 30 minutes by default) and the
    shutdown barrier; a peer that stops sending heartbeats is declared dead after half of it, and JAX
    then ends every other process (exit 134).
    """
    timeout = distributed_timeout()
    print(_("Process {id} of {n}: waiting up to {timeout}s for the others at {coordinator} ...").format(
        id=process_id, n=num_processes, timeout=timeout, coordinator=coordinator), file=sys.stderr, flush=True)
    # Read by XLA when the CPU backend starts, which is after this point.
    flag = f"--xla_cpu_collective_timeout_seconds={timeout}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # JAX's own bound on joining is set past ours: when a peer never arrives, JAX's coordination service ends
    # the process with a C++ abort and a page of stack frames; our watchdog speaks first, in one line.
    bounds = dict(initialization_timeout=timeout + JOIN_GRACE_S, heartbeat_timeout_seconds=max(10, timeout // 2),
                  shutdown_timeout_seconds=timeout)
    where = {} if coordinator == "auto" else dict(coordinator_address=coordinator, num_processes=num_processes,
                                                  process_id=process_id, cluster_detection_method="deactivate")
    watchdog = threading.Timer(timeout, _give_up_joining, (coordinator, num_processes, process_id, timeout, on_give_up))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(**where, **bounds)
    except Exception as exc:  # gRPC and XLA raise assorted types
        raise JaxintroError(_(
            "could not join the {n}-process run at {coordinator} within {timeout}s ({error}); check that every "
            "process was started with the same --coordinator and --num-processes and a distinct --process-id"
        ).format(n=num_processes, coordinator=coordinator, timeout=timeout,
                 error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")) from None
    finally:
        watchdog.cancel()


def _give_up_joining(coordinator: str, num_processes: int, process_id: int, timeout: int,
                     on_give_up: Callable[[], None]) -> None:
    """The watchdog of `initialize_distributed`: one line naming who did not arrive, then exit (JAX cannot be
    interrupted while it waits in C++, and would otherwise abort)."""
    if num_processes > 2:  # the coordinator cannot say who is missing, only that someone is
        missing = _("at least one of the other {others} processes").format(others=num_processes - 1)
    elif process_id == 0:
        missing = _("process 1")
    else:
        missing = _("process 0, the coordinator at {coordinator},").format(coordinator=coordinator)
    print(_("jaxintro train: error: {missing} did not join the {n}-process run at {coordinator} within {timeout}s "
            "(JAXINTRO_DISTRIBUTED_TIMEOUT); start it with the same --coordinator and --num-processes and its own "
            "--process-id").format(missing=missing, n=num_processes, coordinator=coordinator, timeout=timeout),
          file=sys.stderr, flush=True)
    try:
        on_give_up()
    finally:
        os._exit(EXIT_NOT_JOINED)


def check_cluster(folder: Path, flag: str, num_processes: int) -> None:
    """After joining, before any work: all processes agree on their count and see `folder` as one folder.

    JAX's coordinator keeps its own count, so a process started with another `--num-processes` would
    otherwise train on silently. Checkpoints of a multi-process run are written together into one
    folder; per-host folders would make the first save wait for files another host cannot see.
    Process 0 writes a token into the folder, the others must find it in time. Called by every process;
    on a mismatch every process raises the same ConfigError (exit 2).
    """
    from jax.experimental import multihost_utils

    counts = np.asarray(multihost_utils.process_allgather(np.int32(num_processes))).reshape(-1)
    if (counts != jax.process_count()).any():
        said = ", ".join(_("process {i}: {count}").format(i=i, count=int(c)) for i, c in enumerate(counts))
        raise ConfigError(_(
            "the processes disagree on --num-processes ({said}); the run has {n} processes: "
            "start every process with the same --num-processes"
        ).format(said=said, n=jax.process_count()))
    nonce = int(multihost_utils.broadcast_one_to_all(np.random.randint(1, 2**31 - 1, dtype=np.int64)))
    token = folder / f".shared-check-{nonce}"
    if jax.process_index() == 0:
        token.write_text(f"written by process 0 of {jax.process_count()}\n")
    deadline = time.monotonic() + min(SHARED_FOLDER_WAIT_S, distributed_timeout())
    seen = token.exists()
    # Network filesystems may show a new file late; a folder that is not there at all will not appear.
    while not seen and folder.is_dir() and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = token.exists()
    seen_by = np.asarray(multihost_utils.process_allgather(np.int32(seen))).reshape(-1)
    if jax.process_index() == 0:
        token.unlink(missing_ok=True)
    blind = [int(i) for i in np.flatnonzero(seen_by == 0)]
    if blind:
        raise ConfigError(_(
            "{flag} {folder} is not one folder that every process sees: process(es) "
            "{blind} do not see the file process 0 wrote into it; give every process the "
            "same {flag} on a filesystem they share (NFS or a cluster filesystem), since checkpoints are written "
            "together into one folder"
        ).format(flag=flag, folder=folder, blind=", ".join(map(str, blind))))


def _is_local(host: str) -> bool:
    return host in ("localhost", "0.0.0.0", "") or host.startswith("127.")
