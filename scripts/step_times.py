"""The lesson's step at batch 128 in four programs, side by side in one process: `train`'s epoch program, the
speedrun's whole-run program (every epoch in one `lax.scan`) and the speedrun's epoch program (the same step, one
call an epoch, as `train` calls its own), each timed over 10 epochs after its compile, and `train`'s epoch program
with `--record-grad-norm`. The third tells the two parts of the first two's gap apart: one call an epoch, and what
`train`'s step does besides (its metrics); the fourth, against the first, what the gradient's norm costs a step
(with `--clip-norm`, where the clip computes the same norm, `train`'s two programs clip by it).

    python scripts/step_times.py --data-dir DIR [--rounds 3] [--clip-norm 1.0]

Prints one JSON line: per program, the median microseconds of a step over the rounds and the spread (min, max), and
two ratios: `train`'s epoch program to the whole-run program, and with the norm to without. docs/accelerators.md
quotes it on a TPU and on a CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import jax

from jaxintro import speedrun
from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.runtime import configure_jax
from jaxintro.train import Trainer


def epoch_program_step(dataset, epochs: int, *, clip_norm: float | None, record_grad_norm: bool = False) -> float:
    """Seconds per step of `train`'s epoch program (compiled first), over `epochs` epochs."""
    config = TrainConfig(dataset="mnist", epochs=epochs, clip_norm=clip_norm, record_grad_norm=record_grad_norm)
    trainer = Trainer.create(config, dataset)
    state, train, _test = trainer.place(trainer.init_state(), dataset)
    epoch = trainer.compile_epoch(state, train)
    state, metrics = epoch.run(state)
    jax.block_until_ready((state.params, metrics))
    start = time.perf_counter()
    for _ in range(epochs):
        state, metrics = epoch.run(state)
    jax.block_until_ready((state.params, metrics))
    return (time.perf_counter() - start) / (epochs * trainer.steps_per_epoch)


def speedrun_step(dataset, epochs: int, program: str) -> float:
    """Seconds per step of the speedrun's `program` ("run": one call; "epoch": one an epoch) on the lesson's recipe
    (batch 128, Adam 1e-3)."""
    recipe = dataclasses.replace(speedrun.LESSON, epochs=epochs, program=program)
    timed = speedrun.timed_run(recipe, dataset)
    return timed["train_seconds"] / (epochs * (len(dataset.x_train) // recipe.batch_size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--clip-norm", type=float, default=None, help="train's two epoch programs clip by it")
    args = parser.parse_args()
    # Each round builds its programs anew: the persistent cache compiles them once (on a TPU each holds a sort of
    # 60,000 keys, about 10 s to compile, so without it 3 rounds spent minutes compiling).
    configure_jax()
    dataset = load_dataset("mnist", args.data_dir)
    times: dict[str, list[float]] = {"epoch_program": [], "whole_run_program": [], "speedrun_epoch_program": [],
                                     "epoch_program_grad_norm": []}
    for _round in range(args.rounds):  # alternating, so a slow moment of the machine hits each
        times["epoch_program"].append(epoch_program_step(dataset, args.epochs, clip_norm=args.clip_norm))
        times["whole_run_program"].append(speedrun_step(dataset, args.epochs, "run"))
        times["speedrun_epoch_program"].append(speedrun_step(dataset, args.epochs, "epoch"))
        times["epoch_program_grad_norm"].append(
            epoch_program_step(dataset, args.epochs, clip_norm=args.clip_norm, record_grad_norm=True))
    row = {name: {"median_us": statistics.median(ts) * 1e6, "min_us": min(ts) * 1e6, "max_us": max(ts) * 1e6}
           for name, ts in times.items()}
    row["ratio"] = row["epoch_program"]["median_us"] / row["whole_run_program"]["median_us"]
    row["grad_norm_ratio"] = row["epoch_program_grad_norm"]["median_us"] / row["epoch_program"]["median_us"]
    row["backend"] = jax.default_backend()
    print(json.dumps(row))


if __name__ == "__main__":
    main()
