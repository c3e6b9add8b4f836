"""A backend's fixed costs as the floor plus seconds: each command in a fresh process, in one run, beside the floor.

    python scripts/fixed_costs.py --data-dir DIR [--bench] [--speedrun]

The floor is a process that imports JAX, opens the device and runs one tiny program, measured three times: before
the first command, after the warm runs and after the last. The commands: `train` on MNIST (10 epochs) with a fresh
compile cache (cold), again twice (warm), with a new `--lr` and with a new width (both after the warm runs, in the
same cache); with `--bench`, `bench`'s five rows of docs/accelerators.md; with `--speedrun`, `speedrun`. Prints one
JSON line per command as it ends (its wall clock, and for `train` its `Time:` phases and whether its programs came
from the cache), then a last line: each command's wall clock over the floor's median. docs/accelerators.md quotes
it, on the CPU and on an accelerator.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FLOOR = "import jax, jax.numpy as jnp; jnp.ones(3).block_until_ready()"
BENCH_ROWS = "nojit,jit-step,scan-epoch,vmap-seeds-8,matmul-only"


def timed(name: str, args: list[str], env: dict[str, str]) -> dict:
    """Run `python args` in a fresh process; its wall clock, exit code and, for a `--json` command, its report."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
    row = {"name": name, "wall_s": round(time.perf_counter() - start, 3), "exit": proc.returncode}
    if proc.returncode != 0:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
    elif "--json" in args:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update({key: report[key] for key in ("time_breakdown", "compile_cache", "test_accuracy") if key in report})
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="MNIST's folder")
    parser.add_argument("--bench", action="store_true", help="also time bench's five rows")
    parser.add_argument("--speedrun", action="store_true", help="also time speedrun")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_CACHE_HOME": f"{tmp}/cache"}  # one compile cache, empty at the start
        jaxintro = ["-m", "jaxintro.cli"]
        data = ["--dataset", "mnist", "--data-dir", args.data_dir]

        def train(name: str, *flags: str) -> dict:
            return timed(name, [*jaxintro, "train", *data, "--run-dir", f"{tmp}/{name}", "--json", *flags], env)

        floors = [timed("floor", ["-c", FLOOR], env)]
        rows = [train("train_cold"), train("train_warm"), train("train_warm_again")]
        floors.append(timed("floor", ["-c", FLOOR], env))
        rows += [train("train_new_lr", "--lr", "2e-3"), train("train_new_width", "--hidden", "384,128")]
        if args.bench:
            rows.append(timed("bench", [*jaxintro, "bench", *data, "--rows", BENCH_ROWS, "--nojit-steps", "20"], env))
        if args.speedrun:
            rows.append(timed("speedrun", [*jaxintro, "speedrun", "--data-dir", args.data_dir, "--out",
                                           f"{tmp}/speedrun"], env))
        floors.append(timed("floor", ["-c", FLOOR], env))
    floor = statistics.median(f["wall_s"] for f in floors)
    print(json.dumps({"floor_s": [f["wall_s"] for f in floors], "floor_median_s": floor,
                      "over_floor_s": {row["name"]: round(row["wall_s"] - floor, 2) for row in rows}}))


if __name__ == "__main__":
    main()
