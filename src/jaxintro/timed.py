"""Whole training processes, timed from start to final accuracy: `jaxintro bench`'s end-to-end tables.

Each process runs as a learner would run it (`jaxintro train`, the lesson's own script, PyTorch), with
its own compile cache, so what is timed includes starting Python, loading the data and compiling.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jaxintro.errors import JaxintroError
from jaxintro.i18n import _


def last_line(text: str | None) -> str:
    """The last non-empty line of a child's output (where Python puts the exception), cut to 300 characters."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else _("no output")



def time_train_process(args: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall time and peak RSS of one whole `jaxintro train` process (start to final accuracy)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", "train", *args, "--json"],
                          capture_output=True, env=env, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise JaxintroError(_("the timed `jaxintro train {args}` failed (exit {code}): {line}").format(
            args=" ".join(args), code=proc.returncode, line=last_line(proc.stderr)))
    stdout = proc.stdout
    summary = json.loads(stdout.strip().splitlines()[-1])
    return {"wall_seconds": wall, "peak_rss_mb": summary["peak_rss_mb"],
            "test_accuracy": summary["test_accuracy"], "compile_cache": summary["compile_cache"]}


def end_to_end(data_args: list[str], plan_path: Path, epochs: int = 10, rounds: int = 1,
               loops: tuple[str, ...] = ("scan", "python")) -> list[dict[str, Any]]:
    """Whole 10-epoch training processes: the lesson's own script, PyTorch, and `jaxintro train` (each of `loops`,
    cold and warm compile cache), one after the other, `rounds` times over (alternating runs)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            for job, loop in (("lesson-job", "lesson"), ("torch-job", "torch-eager")):
                out = Path(tmp) / f"{job}.json"
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "jaxintro.bench", job, str(plan_path), str(out),
                                       str(epochs)], capture_output=True, text=True,
                                      env={**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-{job}-{round_}")})
                if proc.returncode != 0:
                    raise JaxintroError(_("the timed job {job} failed (exit {code}): {line}").format(
                        job=job, code=proc.returncode, line=last_line(proc.stderr)))
                rows.append({"loop": loop, "cache": "-", "round": round_, "wall_seconds": time.perf_counter() - start,
                             "compile_cache": "-", **json.loads(out.read_text())})
            for loop in loops:
                env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-{loop}-{round_}")}  # cold each round
                for cache in ("cold", "warm"):
                    run_dir = Path(tmp) / f"run-{loop}-{cache}-{round_}"
                    timing = time_train_process([*data_args, "--epochs", str(epochs), "--loop", loop,
                                                 "--run-dir", str(run_dir)], env)
                    rows.append({"loop": loop, "cache": cache, "round": round_, **timing})
    return rows


def best_of_rounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (loop, cache), the round with the least wall time, with the range over rounds (`wall_range`)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        job = (row["loop"], row["cache"])
        walls.setdefault(job, []).append(row["wall_seconds"])
        if job not in best or row["wall_seconds"] < best[job]["wall_seconds"]:
            best[job] = row
    return [{**row, "wall_range": (min(walls[job]), max(walls[job])), "rounds": len(walls[job])}
            for job, row in best.items()]


def members_end_to_end(data_args: list[str], seeds: int, epochs: int = 10, rounds: int = 1) -> dict[str, Any]:
    """One `train --seeds N` process against N sequential `train --seed k` processes: wall time and peak RSS.

    Same data, same epochs, each side with its own empty compile cache (the sequential processes
    share theirs, so only the first compiles: what a user running them one by one gets). With several
    rounds the two sides alternate, and each side's best round is compared.
    """
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        common = [*data_args, "--epochs", str(epochs)]
        for round_ in range(rounds):
            together = time_train_process(
                [*common, "--seeds", str(seeds), "--run-dir", str(Path(tmp) / f"members-{round_}")],
                {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-members-{round_}")})
            env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-sequential-{round_}")}
            singles = [time_train_process([*common, "--seed", str(k), "--run-dir",
                                           str(Path(tmp) / f"seed-{k}-{round_}")], env) for k in range(seeds)]
            pairs.append((together, {"wall_seconds": sum(s["wall_seconds"] for s in singles),
                                     "peak_rss_mb": max(s["peak_rss_mb"] for s in singles),
                                     "test_accuracy": statistics.mean(s["test_accuracy"] for s in singles)}))
    together = min((p[0] for p in pairs), key=lambda side: side["wall_seconds"])
    sequential = min((p[1] for p in pairs), key=lambda side: side["wall_seconds"])
    ratios = [p[0]["wall_seconds"] / p[1]["wall_seconds"] for p in pairs]
    return {"seeds": seeds, "epochs": epochs, "rounds": rounds, "one_process": together, "sequential": sequential,
            "wall_ratio": together["wall_seconds"] / sequential["wall_seconds"],
            "wall_ratio_range": (min(ratios), max(ratios)),
            "peak_rss_ratio": together["peak_rss_mb"] / sequential["peak_rss_mb"]}
