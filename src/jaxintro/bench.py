"""`jaxintro bench`: lesson exercise 4 and more. The same data, init, batch and Adam in every row.

Rows:
- `nojit`: the train step run op by op, no `jit` (100 steps, as the exercise asks);
- `jit-step`: the lesson's loop, one jitted step per batch dispatched from Python;
- `scan-epoch`: the whole epoch compiled as one `lax.scan` program (jaxintro's default);
- `vmap-seeds-8`: that epoch vmapped over 8 models, seeds 0..7, the data shared, on one device;
- `spread-seeds-8`: the same 8 models as `train --seeds 8` trains them: spread over the process's
  devices (on a CPU, one per core), each device training its members one after another;
- `matmul-only`: the step's eight matmuls alone at its shapes, scanned over an epoch: `scan-epoch`'s ceiling;
- `torch-eager` / `torch-compile`: PyTorch on the CPU, the same MLP, init, batches and Adam.

Each row runs in its own process, so its peak RSS is its own and no row warms another's memory or threads. The
children share one persistent compile cache, fresh for each `bench` run: a program two rows (or two rounds) run is
compiled by the first (the epoch's shuffle, the matmul rate's product), the others load it.
The parent never opens a device (one process at a time may hold a TPU chip; a GPU's preallocated
memory would starve the children): the plan (the initial weights, drawn on the host's CPU as `train`
draws them) and the float32 matmul rate come from children; the parent turns times into rates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from jaxintro.bench_plan import SIZES, Plan, RowResult, make_plan, plan_layers, timed_windows
from jaxintro.bench_torch import row_torch, torch_job
from jaxintro.config import BENCH_ROWS, TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import JaxintroError
from jaxintro.i18n import N_, _
from jaxintro.runtime import configure_jax, peak_rss_mb
from jaxintro.timed import last_line

# Why a row was skipped: the row's own process, which knows no --lang, writes it in English into bench.json
# (`bench_torch`'s reasons); `skip_reason` translates it where the table is printed.

def skip_reason(reason: str) -> str:
    """A row's skip reason in the chosen language: its English head (before ": ") translated, the details kept."""
    head, sep, details = reason.partition(": ")
    return _(head) + sep + details


def train_flops_per_step(sizes: tuple[int, ...], batch: int) -> int:
    """Matmul FLOPs of one training step: forward, weight gradients, and input gradients past layer 1."""
    macs = [a * b for a, b in zip(sizes[:-1], sizes[1:])]
    return 2 * batch * (sum(macs) * 2 + sum(macs[1:]))


def matmul_size() -> int:
    """The side of a product that fills this backend: 2048 on a CPU, 8192 on an accelerator (2048 underfills a TPU)."""
    import jax

    return 2048 if jax.default_backend() == "cpu" else 8192


def measure_matmul_gflops(n: int | None = None, repeats: int = 10, timeout: float = 600.0, *,
                          cache: Path | None = None) -> tuple[float, int]:
    """The machine's float32 matmul rate (`matmul_gflops`) and the product's side, measured in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "matmul.json"
        in_child(N_("measuring the matmul rate"), ["matmul", str(n or 0), str(repeats), str(out)], out, timeout,
                 cache=cache)
        rate = json.loads(out.read_text())
        return float(rate["gflops"]), int(rate["n"])


def child(args: list[str], timeout: float, *, cpu_only: bool = False,
          cache: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m jaxintro.bench ARGS` in a fresh process (its own memory, threads and device); `cpu_only`: it never
    opens an accelerator (opening a TPU costs seconds, and one process at a time may hold it); `cache`: the
    persistent compile cache's folder (else none)."""
    command = [sys.executable, "-m", "jaxintro.bench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=child_env(cpu_only=cpu_only, cache=cache))


def child_env(*, cpu_only: bool, cache: Path | None) -> dict[str, str]:
    """A child's environment: JAX's own settings, which it reads as it starts."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"} if cpu_only else dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the user's cache would make a row's compile a load
    if cache is not None:  # every program cached, however fast it compiles (JAX's default skips those under 1 s)
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return env


def in_child(what: str, args: list[str], out: Path, timeout: float, *, cpu_only: bool = False,
             cache: Path | None = None) -> None:
    """`child(ARGS)`, which writes `out`; a JaxintroError naming `what` if it does not."""
    if (proc := child(args, timeout, cpu_only=cpu_only, cache=cache)).returncode != 0 or not out.exists():
        raise JaxintroError(_("bench: {what} failed (exit {code}): {line}").format(
            what=_(what), code=proc.returncode, line=last_line(proc.stderr or proc.stdout)))


def matmul_gflops(n: int | None = None, repeats: int = 10) -> float:
    """This process's float32 matmul rate: a jitted n x n matmul (n: `matmul_size`), median of `repeats` after
    warm-up, at JAX's default precision (what the rows' matmuls run at)."""
    import jax
    import jax.numpy as jnp

    n = n or matmul_size()
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    matmul = jax.jit(lambda m: m @ m)
    matmul(a).block_until_ready()
    times = []
    for _repeat in range(repeats):
        start = time.perf_counter()
        matmul(a).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


# ---------------------------------------------------------------- the rows (run in a child process)


def plan_in_child(x: np.ndarray, y: np.ndarray, folder: Path, *, seed: int, repeats: int, nojit_steps: int,
                  timeout: float = 600.0, cache: Path | None = None) -> Plan:
    """`make_plan` in a child process on the CPU, where `train` draws its initial weights too (the same bits)."""
    data, out = folder / "data.npz", folder / "plan.npz"
    np.savez(data, x=x, y=y)
    in_child(N_("making the plan"), ["plan", str(data), str(out), str(seed), str(repeats), str(nojit_steps)], out,
             timeout, cpu_only=True, cache=cache)
    return Plan.load(out)


def jax_trainer(plan: Plan, seeds: int = 1, *, vmap_all: bool = True, loop: str = "scan"):
    """jaxintro's own Trainer and initial state for the plan (the same seed gives the plan's init and order).

    With `seeds`, the state of that many members, the first the plan's: all vmapped together (`vmap_all`,
    whatever `train`'s default group), or grouped as `train` groups them. `loop` as `train --loop`.
    """
    from jaxintro.train import Trainer

    classes = tuple(str(i) for i in range(SIZES[-1]))
    dataset = Dataset("bench", plan.x, plan.y, plan.x[:1], plan.y[:1], classes, (0, 0), "bench plan")
    config = TrainConfig(batch_size=plan.batch, seed=plan.seed, seeds=seeds, member_group=seeds if vmap_all else 0,
                         loop=loop)
    trainer = Trainer.create(config, dataset)
    state = trainer.init_state()
    init = {f"{n}.{leaf}": v for n, layer in trainer.layout.member(state.params, 0).items()  # the plan's member
            for leaf, v in layer.items()}
    if not all(np.array_equal(init[k], plan.params[k]) for k in plan.params):
        # The rows compare speeds of the same function: a different start would make them incomparable.
        raise JaxintroError(_("bench: the plan's initial parameters differ from the trainer's; a bug, please report"))
    return trainer, state, dataset


def row_nojit(plan: Plan) -> RowResult:
    """The train step without jit: every jnp op dispatched on its own."""
    import jax

    trainer, state, _dataset = jax_trainer(plan)
    step = trainer.step_fn()
    params, opt_state = state.params, state.opt_state
    result = RowResult("nojit")
    times, losses = [], []
    with jax.disable_jit():
        for i in range(plan.nojit_steps + 1):
            idx = plan.perm[i % len(plan.perm)]
            start = time.perf_counter()
            params, opt_state, metrics = step(params, opt_state, (plan.x[idx], plan.y[idx]), None)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - start)
            losses.append(float(metrics["loss"]))
    result.compile_seconds = times[0]  # the first call: nothing compiles, but caches warm up
    result.ms_per_step = statistics.median(times[1:]) * 1e3
    result.losses = losses[:3]
    return result


def _epoch_row(name: str, plan: Plan, first_epoch: Callable, epoch: Callable, state) -> RowResult:
    """Time `first_epoch` (compile included), then the median of `plan.repeats` epochs."""
    import jax

    result = RowResult(name)
    start = time.perf_counter()
    state, metrics = first_epoch(state)
    jax.block_until_ready(metrics)
    result.compile_seconds = time.perf_counter() - start  # includes one epoch; subtracted below
    losses = np.asarray(metrics["loss"])
    result.losses = [float(v) for v in (losses[0] if losses.ndim > 1 else losses)[:3]]  # several models: the first
    holder = {"state": state}

    def run() -> None:
        holder["state"], m = epoch(holder["state"])
        jax.block_until_ready(m)

    times = timed_windows(run, plan.repeats)
    result.ms_per_step = statistics.median(times) / len(plan.perm) * 1e3
    result.compile_seconds = max(result.compile_seconds - statistics.median(times), 0.0)
    return result


def row_jit_step(plan: Plan) -> RowResult:
    """The lesson's loop (`jaxintro train --loop python`): one jitted step per batch from Python."""
    return _trainer_row("jit-step", plan, *jax_trainer(plan, loop="python"))


def row_scan_epoch(plan: Plan) -> RowResult:
    """jaxintro's default (`--loop scan`): the epoch as one compiled `lax.scan`, data on device as uint8."""
    return _trainer_row("scan-epoch", plan, *jax_trainer(plan))


def row_seeds(plan: Plan, layout: str, seeds: int = 8) -> RowResult:
    """That epoch over `seeds` members: all vmapped on one device (`vmap`), or placed and grouped as `jaxintro
    train --seeds` does it (`spread`)."""
    result = _trainer_row(f"{layout}-seeds-{seeds}", plan, *jax_trainer(plan, seeds, vmap_all=layout == "vmap"))
    result.models = seeds
    return result


def _trainer_row(name: str, plan: Plan, trainer, state, dataset) -> RowResult:
    """A row that trains as `jaxintro train` does: placed by `Trainer.place`, compiled by `Trainer.compile_epoch`."""
    state, train, _test = trainer.place(state, dataset)  # where `jaxintro train` puts them
    compiled = {}

    def first_epoch(state):
        compiled["epoch"] = trainer.compile_epoch(state, train)
        return epoch(state)

    def epoch(state):
        return compiled["epoch"].run(state)

    result = _epoch_row(name, plan, first_epoch, epoch, state)
    result.devices = trainer.mesh.size
    return result


def matmul_only_epoch(plan: Plan) -> tuple[Callable, tuple[Any, ...]]:
    """The step's eight matmuls alone, at its shapes, in a `lax.scan` over the epoch; and the carry to start from.

    Forward `x @ w` of every layer; backward each layer's weight gradient `h.T @ delta` and the
    input gradients `delta @ w.T` of every layer but the first (whose is never computed), as
    `train_step`'s program does. No bias, ReLU, softmax, uint8 conversion or Adam: the time that
    would be left if everything else were free. Each step takes one of 8 float32 batches (so no
    product can be hoisted out of the loop) and adds its weight gradients into the carry (so none
    is discarded): one addition per weight, against 6 FLOPs per weight and image for the products.
    """
    import jax
    import jax.numpy as jnp

    ws = [jnp.asarray(w) for w, _b in plan_layers(plan)]
    batches = jnp.asarray(plan.x[plan.perm[:8]], jnp.float32) / 255.0  # (8, batch, features)

    def epoch(sums):
        def body(sums, i):
            hs = [batches[i % len(batches)]]
            for w in ws:
                hs.append(hs[-1] @ w)
            deltas = [hs[-1]]  # the output stands in for its own gradient: only the shapes matter here
            for w in ws[:0:-1]:  # layers L..2
                deltas.insert(0, deltas[0] @ w.T)
            grads = [h.T @ d for h, d in zip(hs[:-1], deltas)]
            return tuple(s + g for s, g in zip(sums, grads)), None

        return jax.lax.scan(body, sums, jnp.arange(len(plan.perm)))[0]

    return epoch, tuple(jnp.zeros_like(w) for w in ws)


def row_matmul_only(plan: Plan) -> RowResult:
    """`matmul_only_epoch`, timed like `scan-epoch`: the ceiling of the compiled epoch on this machine."""
    import jax

    epoch, sums = matmul_only_epoch(plan)
    jitted, compiled = jax.jit(epoch, donate_argnums=0), {}

    def first_run(sums):
        compiled["fn"] = jitted.lower(sums).compile()
        return run(sums)

    def run(sums):
        sums = jax.block_until_ready(compiled["fn"](sums))
        return sums, {"loss": np.empty(0)}  # no loss: nothing is trained

    return _epoch_row("matmul-only", plan, first_run, run, sums)


def lesson_job(plan: Plan, x_test: np.ndarray, y_test: np.ndarray, epochs: int = 10) -> dict[str, float]:
    """The lesson's own training script, as it writes it: float32 host arrays sliced per batch in Python.

    One jitted `train_step` per batch, a fresh permutation each epoch, and after each epoch the
    accuracy on the first 5,000 training images and on the test set; the plan's initial parameters,
    so it trains the same model as every other row.
    """
    import jax
    import jax.numpy as jnp
    import optax

    x_train = plan.x.astype(np.float32) / 255.0  # the lesson keeps the data as float32 NumPy arrays
    y_train = plan.y
    x_eval = x_test.astype(np.float32) / 255.0
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in plan_layers(plan)]

    def forward(params, x):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    def loss_fn(params, x, y):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(forward(params, x)), y[:, None], axis=1))

    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def accuracy(params, x, y):
        return jnp.mean(jnp.argmax(forward(params, x), -1) == y)

    key = jax.random.key(plan.seed)
    steps = len(x_train) // plan.batch
    test_acc, curve = 0.0, []
    for epoch in range(epochs):
        key, perm_key = jax.random.split(key)
        perm = np.asarray(jax.random.permutation(perm_key, len(x_train)))
        for i in range(steps):
            idx = perm[i * plan.batch:(i + 1) * plan.batch]
            params, opt_state, loss = train_step(params, opt_state, x_train[idx], y_train[idx])
        train_acc = float(accuracy(params, x_train[:5000], y_train[:5000]))
        test_acc = float(accuracy(params, x_eval, y_test))
        curve.append(test_acc)
        print(f"Epoch {epoch + 1} | Loss: {float(loss):.4f} | Train Acc: {train_acc:.4f} | Test Acc: {test_acc:.4f}")
    return {"test_accuracy": test_acc, "curve": curve, "peak_rss_mb": peak_rss_mb()}


# The rows, in the order `jaxintro bench` runs them; `config.BENCH_ROWS` names them for `--help`.
ROW_FUNCTIONS: dict[str, Callable[[Plan], RowResult]] = dict(zip(BENCH_ROWS, (
    row_nojit,
    row_jit_step,
    row_scan_epoch,
    lambda plan: row_seeds(plan, "vmap"),
    lambda plan: row_seeds(plan, "spread"),
    row_matmul_only,
    lambda plan: row_torch(plan, compile=False),
    lambda plan: row_torch(plan, compile=True),
), strict=True))


def run_row(name: str, plan: Plan) -> RowResult:
    """Run one row in this process and record its peak RSS."""
    result = ROW_FUNCTIONS[name](plan)
    result.peak_rss_mb = peak_rss_mb()
    if not result.skipped:
        result.samples_per_second = result.models * plan.batch / (result.ms_per_step / 1e3)
    return result


def run_row_subprocess(name: str, plan_path: Path, timeout: float = 1200.0, *,
                       cache: Path | None = None) -> RowResult:
    """Run one row in a fresh Python process (`child`); a failure is the row's error, not the benchmark's."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        proc = child([name, str(plan_path), str(out)], timeout, cache=cache)
        if proc.returncode != 0 or not out.exists():
            return RowResult(name, error=_("exit {code}: {line}").format(code=proc.returncode,
                                                                        line=last_line(proc.stderr or proc.stdout)))
        return RowResult(**json.loads(out.read_text()))


def median_round(results: list[RowResult]) -> RowResult:
    """A row's result from the round with its median speed (the first failure or skip, if any), with the first
    round's compile (the later rounds load the row's programs from the run's compile cache) and the largest peak RSS
    (the compiling round's holds the compiler's memory)."""
    bad = [r for r in results if r.skipped or r.error]
    if bad:
        return bad[0]
    median = sorted(results, key=lambda r: r.ms_per_step)[len(results) // 2]
    return dataclasses.replace(median, compile_seconds=results[0].compile_seconds,
                               peak_rss_mb=max(r.peak_rss_mb for r in results))


def range_over_rounds(rounds: list[list[RowResult]]) -> dict[str, Any]:
    """Per row, the min and max ms/step over rounds, and scan-epoch's speed-up over it within each round (per
    sample: a row that trains several models counts all of them)."""
    spread: dict[str, Any] = {}
    for i, first in enumerate(rounds[0]):
        runs = [r[i] for r in rounds if not (r[i].skipped or r[i].error)]
        if not runs:
            continue
        ms = [r.ms_per_step for r in runs]
        spread[first.name] = {"ms_per_step": (min(ms), max(ms)), "speedup": {}}
    for name in spread:
        if name == "scan-epoch" or "scan-epoch" not in spread:
            continue
        ratios = []
        for results in rounds:
            by_name = {r.name: r for r in results if not (r.skipped or r.error)}
            if name in by_name and "scan-epoch" in by_name:
                row, scan = by_name[name], by_name["scan-epoch"]
                ratios.append((row.ms_per_step / row.models) / (scan.ms_per_step / scan.models))
        spread["scan-epoch"]["speedup"][name] = (min(ratios), max(ratios))
    return spread


def main() -> None:
    """Child-process entry: `python -m jaxintro.bench ROW PLAN.npz OUT.json`; `matmul N REPEATS OUT.json`; `plan
    DATA.npz OUT.npz SEED REPEATS NOJIT_STEPS`."""
    if sys.argv[1] == "matmul":
        n = int(sys.argv[2]) or matmul_size()
        Path(sys.argv[4]).write_text(json.dumps({"gflops": matmul_gflops(n, int(sys.argv[3])), "n": n}))
        return
    if sys.argv[1] == "plan":
        data = np.load(sys.argv[2])
        seed, repeats, nojit_steps = map(int, sys.argv[4:7])
        make_plan(data["x"], data["y"], seed=seed, repeats=repeats, nojit_steps=nojit_steps).save(Path(sys.argv[3]))
        return
    name, plan_path, out = sys.argv[1:4]
    plan = Plan.load(Path(plan_path))
    jobs = {"torch-job": torch_job, "lesson-job": lesson_job}
    if name in jobs:
        z = np.load(plan_path)
        Path(out).write_text(json.dumps(jobs[name](plan, z["x_test"], z["y_test"], int(sys.argv[4]))))
        return
    if name.startswith("spread-seeds-"):
        # Before JAX starts, as `jaxintro train` does: the CPU devices the members spread over.
        from jaxintro.members import cpu_devices_wanted

        cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")  # the run's shared cache, which `child` names
        configure_jax(cpu_devices=cpu_devices_wanted(TrainConfig(seeds=int(name.rsplit("-", 1)[1]))),
                      compile_cache=cache is not None, cache_dir=Path(cache) if cache else None)
    result = run_row(name, plan)
    Path(out).write_text(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main()
