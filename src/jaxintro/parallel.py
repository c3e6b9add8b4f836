"""Data parallelism over a device mesh: `shard_map` with `lax.pmean`, or sharded `jit`; one or many processes.

The lesson's `pmap` is in maintenance mode; its modern forms are here. The mesh has one axis,
`data`. Parameters, optimizer state and the (small) dataset are replicated; each device takes its
slice of every global batch, so the math is that of one device on the whole batch:

- `shard_map`: the epoch runs per device; gradients are averaged with `lax.pmean` explicitly;
- `sharding`: plain `jit`; each batch is constrained to `P("data")` and XLA inserts the all-reduce.

With several processes (`jax.distributed`), the mesh spans every process's devices and each process
feeds and computes only its own devices' slices of every batch.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxintro.errors import ConfigError, JaxintroError

AXIS = "data"
DISTRIBUTED_TIMEOUT_S = 60


def make_mesh(num_devices: int) -> Mesh:
    """A 1-D mesh named `data` over `num_devices` devices (all processes' devices when distributed)."""
    devices = jax.devices()
    if jax.process_count() > 1:
        num_devices = len(devices)  # every device of every process takes part
    if num_devices > len(devices):
        raise ConfigError(
            f"--devices {num_devices} but JAX sees {len(devices)} {devices[0].platform} device(s); on a CPU, "
            "jaxintro creates them when --devices is given before JAX starts; elsewhere use at most "
            f"{len(devices)}"
        )
    # Auto axes: under plain `jit` the compiler propagates the batch sharding and inserts the collectives.
    return jax.make_mesh((num_devices,), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=devices[:num_devices])


def replicated(mesh: Mesh) -> NamedSharding:
    """The sharding of an array copied on every device of `mesh`."""
    return NamedSharding(mesh, P())


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place every array of `tree` on all devices of `mesh` (works across processes: each gives its full copy)."""
    sharding = replicated(mesh)

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


def check_batch(batch_size: int, mesh: Mesh) -> None:
    """The global batch must split evenly over the mesh."""
    n = mesh.shape[AXIS]
    if batch_size % n:
        raise ConfigError(f"--batch-size {batch_size} does not split over {n} devices; use a multiple of {n}")


def check_coordinator(coordinator: str, num_processes: int, process_id: int) -> None:
    """Refuse a malformed address, a bad process id, or (for process 0) a port already taken."""
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ConfigError(f"--process-id must be in 0..{num_processes - 1}; got {process_id}")
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got {coordinator!r}")
    if process_id == 0 and _is_local(host):
        # The coordinator listens on PORT: say so plainly instead of a gRPC bind failure.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("" if host in ("0.0.0.0", "") else host, int(port)))
            except OSError:
                raise ConfigError(f"--coordinator port {port} is already in use on {host}; choose another port") \
                    from None


def initialize_distributed(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join a multi-process run (`jax.distributed`, gloo collectives on CPU) with bounded time-outs."""
    check_coordinator(coordinator, num_processes, process_id)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = int(os.environ.get("JAXINTRO_DISTRIBUTED_TIMEOUT", DISTRIBUTED_TIMEOUT_S))
    try:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id, initialization_timeout=timeout,
                                   heartbeat_timeout_seconds=max(10, timeout // 2),
                                   shutdown_timeout_seconds=timeout)
    except Exception as exc:  # gRPC and XLA raise assorted types
        raise JaxintroError(
            f"could not join the {num_processes}-process run at {coordinator} within {timeout}s "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); check that every process was started "
            "with the same --coordinator and --num-processes and a distinct --process-id"
        ) from None


def _is_local(host: str) -> bool:
    return host in ("localhost", "0.0.0.0", "") or host.startswith("127.")
