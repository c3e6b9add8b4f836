"""What the epoch program's compile time is made of: each part compiled alone, then the compiler's own trace.

    JAX_ENABLE_COMPILATION_CACHE=false python scripts/compile_parts.py --data-dir DIR [--trace-dir DIR]

Run it in a fresh process without the persistent cache (every compile cold). It prints the seconds of:
the first tiny program (opening the device), the initialisation op by op and as one jitted program,
`jax.random.permutation` of the training set, the epoch's plan (the shuffle, its own program), one step,
the epoch (without the shuffle) on 1,280, 6,000 and all training images, and the scoring program; then the
longest host events of the traced compile of the whole epoch (the XLA passes, by name). docs/accelerators.md quotes its output on a TPU.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.layout import compile_plan
from jaxintro.scoring import jit_count_correct
from jaxintro.train import Trainer


def timed(label: str, work: Callable[[], Any]) -> Any:
    """Run `work`, wait for its arrays, print its seconds."""
    start = time.perf_counter()
    result = jax.block_until_ready(work())
    print(f"{label:36s} {time.perf_counter() - start:7.2f} s", flush=True)
    return result


def longest_events(trace_dir: Path, count: int = 25) -> list[tuple[str, float, int]]:
    """The host events of a `jax.profiler` trace with the most total time: (name, ms, occurrences)."""
    total: collections.Counter = collections.Counter()
    seen: collections.Counter = collections.Counter()
    for path in trace_dir.rglob("perfetto_trace.json.gz"):
        events = json.loads(gzip.decompress(path.read_bytes()))
        for event in events.get("traceEvents", []) if isinstance(events, dict) else events:
            if event.get("ph") == "X" and "dur" in event:
                total[event["name"]] += event["dur"]
                seen[event["name"]] += 1
    return [(name, us / 1e3, seen[name]) for name, us in total.most_common(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="MNIST's folder (default: the user cache)")
    parser.add_argument("--trace-dir", type=Path, default=Path("compile-trace"), help="where the compile's trace goes")
    args = parser.parse_args()
    timed("device start (first tiny program)", lambda: jnp.ones(3))
    dataset = timed("load mnist", lambda: load_dataset("mnist", args.data_dir))
    trainer = Trainer.create(TrainConfig(), dataset)
    state = timed("init (the initial weights' jitted draw, cold)", trainer.init_state)
    state, train, test = trainer.place(state, dataset)
    params, key = state.params, state.key
    timed("permutation of the training set", lambda: jax.jit(
        lambda k: jax.random.permutation(k, len(train[0]))).lower(key).compile())
    timed("plan_epoch (the shuffle's own program)", lambda: compile_plan(trainer.layout.plan_fn(len(train[0])), key))
    timed("step (batch 128)", lambda: trainer.compile_step(state, (train[0][:128], train[1][:128])))
    for n in (1280, 6000):
        timed(f"epoch on {n} images (without the shuffle)", lambda: trainer.lower_epoch(
            state, (train[0][:n], train[1][:n])).compile())
    with jax.profiler.trace(str(args.trace_dir), create_perfetto_trace=True):
        timed("epoch on every image (traced, without the shuffle)", lambda: trainer.lower_epoch(state, train).compile())
    timed("scoring (count_correct)", lambda: jit_count_correct(trainer.model).lower(params, *test).compile())
    print("longest host events of the traced compile (ms in all, occurrences):")
    for name, ms, occurrences in longest_events(args.trace_dir):
        print(f"  {ms:9.1f} {occurrences:6d}  {name[:100]}")


if __name__ == "__main__":
    main()
