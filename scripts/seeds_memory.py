"""One point of the many-models curve: `train --seeds N --epochs 2`, then the device's peak memory and the estimate.

    python scripts/seeds_memory.py N --data-dir DIR [--matmul]

Each N in a fresh process (the peak is the process's). Prints one JSON line: the exit code, the
device's peak bytes (`memory_stats()`, None on a CPU, which keeps no such count), the bytes
`memory.estimate_memory_bytes` planned for, and with `--matmul` the float32 matmul rate of an 8192-square
product (GFLOP/s). The run's own line gives its samples per second. docs/accelerators.md quotes its
output on a TPU.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import jax

from jaxintro import memory
from jaxintro.cli import main as jaxintro
from jaxintro.config import LESSON_SIZES, TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", type=int)
    parser.add_argument("--data-dir", default=None, help="MNIST's folder (default: the user cache)")
    parser.add_argument("--matmul", action="store_true", help="also measure the float32 matmul rate (8192-square)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        code = jaxintro(["train", "--dataset", "mnist", *(["--data-dir", args.data_dir] if args.data_dir else []),
                         "--seeds", str(args.seeds), "--epochs", "2", "--run-dir", f"{run_dir}/run"])
    stats = jax.local_devices()[0].memory_stats() or {}
    row = {"seeds": args.seeds, "exit": code, "peak_bytes": stats.get("peak_bytes_in_use"),
           "estimate_bytes": memory.estimate_memory_bytes(TrainConfig(seeds=args.seeds), LESSON_SIZES, 60_000)}
    if args.matmul:
        from jaxintro.bench import matmul_gflops

        row["matmul_gflops"] = matmul_gflops(8192)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
