"""`jaxintro profile`: trace warm training steps with `jax.profiler`, then read the trace back.

Pure functions first: read a Perfetto trace's XLA op events, read the compiled HLO (`hlo.py`: each
op's kind, source line and, for dots, FLOPs), split the traced wall time between the ops, and the
roofline arithmetic. Then the one function with side effects, `profile_training`: it compiles the
same program `jaxintro train` runs (`Trainer`, `train_epoch`, `python_epoch`), warms it, times it,
traces it and measures this machine's matmul rate and memory bandwidth in the same process.

On the CPU backend every executed HLO instruction is one trace event on the thread that ran it,
named after the instruction and carrying `hlo_op`, `hlo_module` and `run_id` arguments; the names
are those of `compiled.as_text()`. An accelerator (a TPU) writes its own timeline instead: a process
`/device:TPU:0` whose thread "XLA Ops" holds one event per executed instruction, named as in
`compiled.as_text()`, and whose thread "XLA Modules" holds one event per program run, which names the
program (`jit_train_epoch(<fingerprint>)`) for the ops inside it. Independent ops may run at the same time on different threads,
and a `while` (the scan) or `call` event encloses the ops it runs, so the op table splits each
moment of wall time between the ops running then (see `attribute_wall_time`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Collection, NamedTuple, Sequence

import numpy as np

from jaxintro.config import TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import JaxintroError
from jaxintro.hlo import HloModule, op_flops, op_kind, op_source, parse_hlo
from jaxintro.i18n import _
from jaxintro.jsonio import json_safe

# Ops that run other ops: their events enclose their children's, so they own only the time when
# none of those runs (a loop's own bookkeeping).
CONTAINER_OPCODES = frozenset({"while", "call", "conditional"})
PERFETTO_FILE = "perfetto_trace.json.gz"


# ---------------------------------------------------------------- the trace


class TraceOp(NamedTuple):
    """One execution of one XLA op, as the profiler recorded it."""

    name: str  # the HLO instruction's name, as in `compiled.as_text()`
    program: str  # the HLO module, e.g. `jit_train_epoch`
    start_us: float
    dur_us: float
    tid: int  # the thread that ran it

    @property
    def end_us(self) -> float:
        """When it finished."""
        return self.start_us + self.dur_us


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a gzipped Chrome/Perfetto trace JSON; a JaxintroError naming the file if it is not one."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, EOFError, ValueError) as exc:
        raise JaxintroError(_("{path} is not a gzipped trace JSON ({error}); run `jaxintro profile` again").format(
            path=path, error=exc)) from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise JaxintroError(_("{path} holds no `traceEvents` list; run `jaxintro profile` again").format(path=path))
    return events


def trace_ops(events: Sequence[dict[str, Any]]) -> list[TraceOp]:
    """The XLA op executions among trace events: the host's complete events ("X") with an `hlo_op` argument (a
    CPU), else the device's events on its "XLA Ops" thread (an accelerator)."""
    ops = []
    for event in events:
        args = event.get("args") or {}
        if event.get("ph") == "X" and "hlo_op" in args:
            ops.append(TraceOp(str(args["hlo_op"]), str(args.get("hlo_module", "?")), float(event["ts"]),
                               float(event.get("dur", 0.0)), int(event.get("tid", 0))))
    return ops or device_ops(events)


def device_ops(events: Sequence[dict[str, Any]]) -> list[TraceOp]:
    """An accelerator's op executions: its "XLA Ops" thread's events, each in the program its "XLA Modules" thread
    ran at that moment (a TPU's trace names no module on the op itself)."""
    threads = {(e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), e.get("pid"),
                   str(e.get("name", "?")).split("(")[0]) for e in events
                  if e.get("ph") == "X" and threads.get((e.get("pid"), e.get("tid"))) == "XLA Modules")
    ops = []
    for event in events:
        if event.get("ph") == "X" and threads.get((event.get("pid"), event.get("tid"))) == "XLA Ops":
            start = float(event["ts"])
            program = next((name for begin, end, pid, name in runs
                            if pid == event.get("pid") and begin <= start <= end), "?")
            ops.append(TraceOp(str(event.get("name")), program, start, float(event.get("dur", 0.0)),
                               int(event.get("tid", 0))))
    return ops


def attribute_wall_time(
    ops: Sequence[TraceOp], containers: Collection[tuple[str, str]] = ()
) -> tuple[dict[tuple[str, str], float], float, float]:
    """Split the window from the first op's start to the last op's end between the ops.

    Each moment goes to the ops running then, in equal parts (two ops on two threads get half
    each), except that a container (`(program, name)` in `containers`: a loop, a call) only gets
    the moments when none of the ops inside it runs. Moments when no op runs are gaps.

    Returns:
        (wall microseconds per `(program, name)`, gap microseconds, window microseconds); the
        walls and the gaps add up to the window.
    """
    if not ops:
        return {}, 0.0, 0.0
    bounds = sorted({t for op in ops for t in (op.start_us, op.end_us)})
    order = sorted(range(len(ops)), key=lambda i: ops[i].start_us)
    wall: dict[tuple[str, str], float] = defaultdict(float)
    gaps = 0.0
    active: list[int] = []
    next_op = 0
    for lo, hi in zip(bounds, bounds[1:]):
        while next_op < len(order) and ops[order[next_op]].start_us <= lo:
            active.append(order[next_op])
            next_op += 1
        # An op that ends after `lo` runs through the whole interval: no boundary lies inside it.
        active = [i for i in active if ops[i].end_us > lo]
        if not active:
            gaps += hi - lo
            continue
        leaves = [i for i in active if (ops[i].program, ops[i].name) not in containers]
        if leaves:
            for i in leaves:
                wall[ops[i].program, ops[i].name] += (hi - lo) / len(leaves)
        else:  # only loops are running: their own bookkeeping, charged to the innermost one
            inner = max(active, key=lambda i: ops[i].start_us)
            wall[ops[inner].program, ops[inner].name] += hi - lo
    return dict(wall), gaps, bounds[-1] - bounds[0]


def containers_of(ops: Sequence[TraceOp], modules: dict[str, HloModule]) -> set[tuple[str, str]]:
    """The traced ops that run other ops (loops, calls), by their opcode (by name where the HLO is missing)."""
    found = set()
    for op in ops:
        module = modules.get(op.program)
        hlo = module.ops.get(op.name) if module else None
        opcode = hlo.opcode if hlo else re.sub(r"[.\d]+$", "", op.name)
        if opcode in CONTAINER_OPCODES:
            found.add((op.program, op.name))
    return found


# ---------------------------------------------------------------- the op table


class OpRow(NamedTuple):
    """One op of the table, per training step."""

    name: str  # the HLO instruction, as in the program's `compiled.as_text()`
    program: str
    kind: str
    calls_per_step: float  # 1 inside the step; 1/steps for the shuffle, run once per traced window
    us_per_step: float  # the op's own time (its trace events' durations; a loop's: the time none of its ops run)
    wall_us_per_step: float  # its part of the wall clock (shared with ops running at the same time)
    share: float  # wall_us_per_step over the traced step time
    flops_per_call: int  # matmul FLOPs (dots only)
    gflops: float | None  # achieved matmul rate over the op's own time (dots only)
    source: str


class OpTable(NamedTuple):
    """The ops of one traced window, per step, and the time the ops do not cover."""

    rows: list[OpRow]  # largest wall time first
    gaps_us_per_step: float  # inside the window, no op running (scheduling, dispatch between steps)
    window_us_per_step: float  # first op's start to last op's end
    step_us: float  # the traced window's wall clock (perf_counter), per step

    @property
    def ops_us_per_step(self) -> float:
        """The ops' wall time, per step."""
        return sum(r.wall_us_per_step for r in self.rows)

    @property
    def outside_us_per_step(self) -> float:
        """Wall clock the trace's ops do not span: the dispatch before the first op, the sync after the last."""
        return self.step_us - self.window_us_per_step


def op_table(ops: Sequence[TraceOp], modules: dict[str, HloModule], steps: int, step_us: float) -> OpTable:
    """The table of a trace of `steps` steps whose wall clock was `step_us` per step."""
    containers = containers_of(ops, modules)
    walls, gaps, window = attribute_wall_time(ops, containers)
    own: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for op in ops:
        own[op.program, op.name] += op.dur_us
        calls[op.program, op.name] += 1
    for key in containers:  # a loop's event spans all its ops: its own time is only its bookkeeping
        own[key] = walls.get(key, 0.0)
    empty = HloModule("?", {}, {}, {}, "")
    rows = []
    for key in calls:
        program, name = key
        module = modules.get(program, empty)
        flops = op_flops(module, name)
        rows.append(OpRow(
            name=name, program=program, kind=op_kind(module, name), calls_per_step=calls[key] / steps,
            us_per_step=own[key] / steps, wall_us_per_step=walls.get(key, 0.0) / steps,
            share=walls.get(key, 0.0) / steps / step_us if step_us > 0 else math.nan,
            flops_per_call=flops,
            gflops=flops * calls[key] / (own[key] * 1e3) if flops and own[key] > 0 else None,
            source=op_source(module, name)))
    rows.sort(key=lambda r: (-r.wall_us_per_step, r.name))
    return OpTable(rows, gaps / steps, window / steps, step_us)


# ---------------------------------------------------------------- the roofline


class Roofline(NamedTuple):
    """What the machine's matmul rate and memory bandwidth allow one step, against its measured time."""

    peak_gflops: float  # measured matmul rate (the higher of two measurements)
    bandwidth_gbs: float  # measured memory bandwidth (the higher of two measurements)
    flops: float  # per step, from XLA's cost analysis
    bytes_accessed: float  # per step, from XLA's cost analysis
    intensity: float  # flops per byte
    ridge: float  # the intensity at which the machine turns from memory- to compute-bound
    bound_gflops: float  # min(peak, intensity * bandwidth)
    bound_s: float  # the step's time at that rate
    measured_s: float
    limited_by: str  # "compute" or "memory"

    @property
    def fraction(self) -> float:
        """How close the step comes to its bound (1.0: at the roofline)."""
        return self.bound_s / self.measured_s if self.measured_s > 0 else math.nan


def roofline(flops: float, bytes_accessed: float, peak_gflops: float, bandwidth_gbs: float,
             measured_s: float) -> Roofline:
    """The roofline bound of a step that does `flops` and moves `bytes_accessed`, on this machine."""
    if min(flops, bytes_accessed, peak_gflops, bandwidth_gbs) <= 0:
        raise JaxintroError(_("roofline needs positive numbers, got flops={flops}, bytes={bytes}, peak={peak} GFLOP/s, "
                              "bandwidth={bandwidth} GB/s; a bug, please report").format(
            flops=flops, bytes=bytes_accessed, peak=peak_gflops, bandwidth=bandwidth_gbs))
    intensity = flops / bytes_accessed
    memory_gflops = intensity * bandwidth_gbs
    bound = min(peak_gflops, memory_gflops)
    return Roofline(peak_gflops, bandwidth_gbs, flops, bytes_accessed, intensity, peak_gflops / bandwidth_gbs,
                    bound, flops / (bound * 1e9), measured_s, "compute" if peak_gflops <= memory_gflops else "memory")


def cost_numbers(cost: Any) -> dict[str, float]:
    """`flops`, `bytes accessed` and `transcendentals` of `compiled.cost_analysis()` (a dict, or a list of one)."""
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    return {key: float(cost.get(key, math.nan)) for key in ("flops", "bytes accessed", "transcendentals")}


def measure_bandwidth_gbs(mib: int = 64, repeats: int = 10, window_s: float = 0.02) -> float:
    """This machine's memory bandwidth: a jitted in-place `a + 1` over `mib` MiB of float32, median of `repeats`.

    Each call reads and writes the array once. The input is donated, so the output reuses its
    buffer: a fresh 64 MiB allocation would be page-faulted in every call and measure the kernel,
    not the memory. 64 MiB is twice this machine's 32 MiB L3, so the data comes from DRAM. Each
    repeat queues as many calls as fill `window_s` before it waits for them: on a TPU one call moves
    its 128 MiB in a sixth of a millisecond, less than a dispatch and a sync, which would otherwise be
    what is timed (a CPU's call takes milliseconds: a few calls).
    """
    import jax
    import jax.numpy as jnp

    n = mib * 2**20 // 4
    add_one = jax.jit(lambda a: a + 1.0, donate_argnums=0)
    a = add_one(jnp.zeros(n, jnp.float32)).block_until_ready()  # compiled, and every page touched once
    start = time.perf_counter()
    a = add_one(a).block_until_ready()
    calls = min(100, max(1, round(window_s / (time.perf_counter() - start))))
    times = []
    for _repeat in range(repeats):
        start = time.perf_counter()
        for _call in range(calls):
            a = add_one(a)
        a.block_until_ready()
        times.append((time.perf_counter() - start) / calls)
    return 2 * n * 4 / statistics.median(times) / 1e9


# ---------------------------------------------------------------- the traced run (side effects)


@dataclasses.dataclass
class ProfileReport:
    """Everything `jaxintro profile` prints, and writes as profile.json."""

    dataset: str
    model: str
    layers: tuple[int, ...]
    loop: str
    batch_size: int
    steps: int
    images: int  # training images in the traced window's batches
    images_repeated: bool  # the dataset has fewer than steps * batch images: they repeat
    out_dir: Path
    trace_file: Path  # perfetto_trace.json.gz
    xplane_file: Path | None  # TensorBoard's raw profile
    hlo_files: dict[str, Path]  # program -> its compiled HLO text, where the op names are
    repeats: int  # untraced windows timed
    untraced_step_s: float  # median over windows of `steps` steps, no profiler
    traced_step_s: float  # the traced window's wall clock, per step
    table: OpTable
    cost: dict[str, float]  # XLA's cost analysis of one compiled step
    analytic_flops: int  # `bench.train_flops_per_step`: the matmuls only
    roofline: Roofline
    matmul_n: int  # the measured matmul's size
    bandwidth_mib: int  # the array the bandwidth was measured on
    members: int = 1  # models trained together (`--seeds`): the step, its cost and its roofline are all of theirs

    @property
    def samples_per_s(self) -> float:
        """Training images a second, all models together, at the untraced step time."""
        return self.members * self.batch_size / self.untraced_step_s

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values (NaN as null)."""
        table = self.table
        return json_safe({
            "dataset": self.dataset, "model": self.model, "layers": list(self.layers), "loop": self.loop,
            "batch_size": self.batch_size, "members": self.members, "samples_per_s": self.samples_per_s,
            "steps": self.steps, "images": self.images,
            "images_repeated": self.images_repeated, "out_dir": str(self.out_dir),
            "trace_file": str(self.trace_file), "xplane_file": str(self.xplane_file) if self.xplane_file else None,
            "hlo_files": {k: str(v) for k, v in self.hlo_files.items()},
            "repeats": self.repeats, "untraced_step_ms": self.untraced_step_s * 1e3,
            "traced_step_ms": self.traced_step_s * 1e3,
            "ops": [row._asdict() for row in table.rows],
            "ops_us_per_step": table.ops_us_per_step, "gaps_us_per_step": table.gaps_us_per_step,
            "window_us_per_step": table.window_us_per_step, "outside_us_per_step": table.outside_us_per_step,
            "cost_analysis": dict(self.cost),
            "analytic_matmul_flops": self.analytic_flops,
            "roofline": {**self.roofline._asdict(), "fraction": self.roofline.fraction, "matmul_n": self.matmul_n,
                         "bandwidth_mib": self.bandwidth_mib},
        })


def window_images(x: np.ndarray, y: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The first `count` training images; when there are fewer, the set repeats (and the flag says so)."""
    if count <= len(x):
        return x[:count], y[:count], False
    index = np.arange(count) % len(x)
    return x[index], y[index], True


def newest_trace(out_dir: Path, since: float) -> tuple[Path, Path | None]:
    """The Perfetto file (and TensorBoard's xplane.pb) of the trace written into `out_dir` after `since`."""
    sessions = sorted((out_dir / "plugins" / "profile").glob("*/" + PERFETTO_FILE), key=os.path.getmtime)
    if not sessions or os.path.getmtime(sessions[-1]) < since - 1.0:
        raise JaxintroError(_("jax.profiler wrote no {file} under {folder}; check that --out is on a local, "
                              "writable disk").format(file=PERFETTO_FILE, folder=out_dir / "plugins" / "profile"))
    session = sessions[-1].parent
    return sessions[-1], next(iter(sorted(session.glob("*.xplane.pb"))), None)


def traced_window(run_window: Any, state: Any, out_dir: Path) -> tuple[float, Path, Path | None]:
    """Run one window under `jax.profiler`: its seconds, the Perfetto trace and the xplane file it wrote."""
    import jax

    # Without the Python tracer: it records every Python call, which would slow the lesson's loop's
    # dispatch several-fold and put that slowdown into the profile.
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    trace_started = time.time()
    try:
        jax.profiler.start_trace(str(out_dir), create_perfetto_trace=True, profiler_options=options)
    except RuntimeError as exc:  # another trace already runs in this process (jaxintro used as a library)
        raise JaxintroError(_("jax.profiler could not start a trace: {error}; stop the other trace first").format(
            error=exc)) from None
    try:
        start = time.perf_counter()
        run_window(state)
        traced_s = time.perf_counter() - start
    finally:
        try:
            jax.profiler.stop_trace()  # writes the trace files
        except (RuntimeError, OSError) as exc:
            raise JaxintroError(_("jax.profiler could not write the trace into {folder}: {error}; choose another "
                                  "--out").format(folder=out_dir, error=exc)) from None
    return (traced_s, *newest_trace(out_dir, trace_started))


def profile_training(config: TrainConfig, dataset: Dataset, *, steps: int, out_dir: Path, repeats: int = 3,
                     matmul_n: int | None = None, bandwidth_mib: int = 64) -> ProfileReport:
    """Compile `config`'s training program for `steps` batches, warm it, time it, trace it; measure the machine.

    `--loop scan` runs the programs `jaxintro train` runs (`Trainer.compile_epoch`: the shuffle, then a
    `lax.scan` of `train_step`), given exactly `steps` batches of images, so one call is
    one traced window; `--loop python` runs `python_epoch`, the lesson's loop of jitted steps, on
    the same images. Either way "per step" below is the window's time over `steps`.
    """
    import jax

    from jaxintro import bench
    from jaxintro.train import Trainer, TrainState

    trainer = Trainer.create(config, dataset)
    matmul_n = matmul_n or bench.matmul_size()  # a product that fills this backend
    batch = config.batch_size
    x, y, repeated = window_images(dataset.x_train, dataset.y_train, steps * batch)
    # Placed and compiled as `jaxintro train` does it, on a window of exactly `steps` batches.
    state, window, _test = trainer.place(trainer.init_state(), dataset._replace(x_train=x, y_train=y))
    epoch = trainer.compile_epoch(state, window)
    programs = list(epoch.programs)
    # The step alone, for its cost analysis (with `--loop python` it is the program the loop runs).
    steps_run = [(programs[1], 1)] if config.loop == "python" else trainer.cost_steps(state, (x[:batch], y[:batch]))

    def run_window(state: TrainState) -> TrainState:
        state, metrics = epoch.run(state)
        jax.block_until_ready((state.params, state.opt_state, metrics))
        return state

    # The machine's rates are measured before the windows and again after the trace; the higher of each
    # is kept, as `jaxintro bench` does: on a shared machine a busy moment can only lower a rate.
    peaks, bandwidths = [bench.matmul_gflops(matmul_n)], [measure_bandwidth_gbs(bandwidth_mib)]
    state = run_window(state)  # warm: every program compiled and run once before anything is timed
    times = []
    for _repeat in range(repeats):
        start = time.perf_counter()
        state = run_window(state)
        times.append(time.perf_counter() - start)

    traced_s, trace_file, xplane = traced_window(run_window, state, out_dir)

    modules = {}
    hlo_files = {}
    for program in programs:
        text = program.as_text()
        module = parse_hlo(text)
        modules[module.name] = module
        hlo_files[module.name] = out_dir / f"{module.name}.hlo.txt"
        hlo_files[module.name].write_text(text, encoding="utf-8")
    ops = trace_ops(read_trace(trace_file))
    if not ops:
        raise JaxintroError(_("{path} holds no XLA op events (no `hlo_op` argument, no device \"XLA Ops\" thread): "
                              "this JAX's profiler writes another format; open the trace in Perfetto instead").format(
            path=trace_file))
    table = op_table(ops, modules, steps, traced_s / steps * 1e6)

    costs = [(cost_numbers(program.cost_analysis()), runs) for program, runs in steps_run]
    cost = {name: sum(each[name] * runs for each, runs in costs) for name in costs[0][0]}
    layers = trainer.model.sizes
    untraced_s = statistics.median(times) / steps
    peaks.append(bench.matmul_gflops(matmul_n))
    bandwidths.append(measure_bandwidth_gbs(bandwidth_mib))
    return ProfileReport(
        dataset=dataset.name, model=config.model, layers=layers, loop=config.loop, batch_size=batch, steps=steps,
        images=len(x), images_repeated=repeated, out_dir=out_dir, trace_file=trace_file, xplane_file=xplane,
        hlo_files=hlo_files, repeats=repeats, untraced_step_s=untraced_s, traced_step_s=traced_s / steps,
        table=table, cost=cost,
        analytic_flops=config.members * bench.train_flops_per_step(layers, batch),
        roofline=roofline(cost["flops"], cost["bytes accessed"], max(peaks), max(bandwidths), untraced_s),
        matmul_n=matmul_n, bandwidth_mib=bandwidth_mib, members=config.members,
    )

