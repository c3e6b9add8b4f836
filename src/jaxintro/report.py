"""What `jaxintro train` and `sweep` print and save about a run: the header, the summary and `result.json`'s
fields, the plots, and where the time went (what is about its members, `members.py` says).

The command (`commands/train.py`) resolves the run and trains it; everything a learner reads about it
is written here, in the chosen language.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from jaxintro.config import TrainConfig
from jaxintro.i18n import N_, _, ngettext

# What `fit`'s `compile_cache` says about the training program (the per-epoch or per-step one); translated when printed.
CACHE_WORDS = {"hit": N_("training program loaded from the persistent cache"),
               "miss": N_("training program compiled, then stored in the persistent cache"),
               "off": N_("persistent cache off")}
# The phases of `time_breakdown`, as the summary line names them.
TIME_WORDS = {"setup": N_("set-up"), "data": N_("data"), "init": N_("init"), "compile": N_("compile"),
              "train": N_("training"),
              "eval": N_("evaluation"), "checkpoint": N_("checkpoints"), "plot": N_("plot"), "other": N_("other")}


def print_header(config: TrainConfig, dataset: Any, run_dir: Path) -> int:
    """The line that says what trains on what, and where it is written; return the devices members spread over."""
    from jaxintro.members import header

    facts = dict(model=config.model, layers="-".join(map(str, (dataset.num_features, *config.hidden,
                                                                dataset.num_classes))),
                 dataset=dataset.name, train=len(dataset.x_train), test=len(dataset.x_test), source=dataset.source,
                 loop=config.loop, run_dir=run_dir)
    line, spread = header(config, facts)
    print(line, flush=True)
    return spread


def plot_curves(config: TrainConfig, dataset: Any, rows: list[dict[str, Any]], run_dir: Path) -> None:
    """`curves.png`: loss and accuracy per epoch (several members: each faint, their mean bold)."""
    from jaxintro.faults import run_write
    from jaxintro.members import curves_title
    from jaxintro.plots import plot_curves as plot  # matplotlib loads after training, off the memory peak

    with run_write("curves.png", run_dir):
        plot(rows, run_dir / "curves.png", title=curves_title(config, dataset))


def summarize(config: TrainConfig, dataset: Any, result: Any, rows: list[dict[str, Any]], run_dir: Path, *,
              spread: int, primary: bool, clock: dict[str, float]) -> dict[str, Any]:
    """The run's summary: `result.json`, and `--json`'s last line (a sweep also draws `sweep.png`)."""
    import jax

    from jaxintro.members import summary_fields
    from jaxintro.runtime import peak_rss_mb

    last = rows[-1]
    summary = {
        "dataset": dataset.name,
        "model": config.model,
        "epochs": last["epoch"],
        "param_count": result.param_count,
        "test_accuracy": last["test_accuracy"],
        "train_accuracy": last["train_accuracy"],
        "final_loss": last["loss"],
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "samples_per_second": result.samples_per_second,
        "compile_cache": result.compile_cache,
        "loop": config.loop,
        "seed": config.seed,
        "devices": len(jax.devices()) if jax.process_count() > 1 else config.devices,
        "processes": jax.process_count(),
        "peak_rss_mb": peak_rss_mb(),
        "run_dir": str(run_dir),
        "finished": not result.stopped_early,
    }
    summary.update(summary_fields(config, last, result, dataset, run_dir, spread=spread, primary=primary,
                                  clock=clock))
    return summary


def print_done(config: TrainConfig, summary: dict[str, Any], result: Any, run_dir: Path) -> None:
    """The last two lines: the test accuracy in its sentence, and where the time went."""
    from jaxintro.members import accuracy_text

    epochs = summary["epochs"]
    if not math.isfinite(result.samples_per_second):  # a resume that only wrote what the last process had trained
        print(ngettext(
            "Done: test accuracy {accuracy} after {epochs} epoch, all trained before this resume, which wrote "
            "the files left to write. Curves: {curves}",
            "Done: test accuracy {accuracy} after {epochs} epochs, all trained before this resume, which wrote "
            "the files left to write. Curves: {curves}",
            epochs,
        ).format(accuracy=accuracy_text(config, summary), epochs=epochs, curves=run_dir / "curves.png"))
    else:
        print(ngettext(
            "Done: test accuracy {accuracy} after {epochs} epoch, {seconds:.1f}s training ({rate:,.0f} samples/s), "
            "compile {compile:.2f}s ({cache}). Curves: {curves}",
            "Done: test accuracy {accuracy} after {epochs} epochs, {seconds:.1f}s training ({rate:,.0f} samples/s), "
            "compile {compile:.2f}s ({cache}). Curves: {curves}",
            epochs,
        ).format(accuracy=accuracy_text(config, summary), epochs=epochs, seconds=result.train_seconds,
                 rate=result.samples_per_second, compile=result.compile_seconds,
                 cache=_(CACHE_WORDS[result.compile_cache]), curves=run_dir / "curves.png"))
    times = summary["time_breakdown"]
    labels = {name: _(word) for name, word in TIME_WORDS.items()}
    print(_("Time: {parts}; {total:.1f}s in all").format(
        parts=", ".join(f"{labels[name]} {times[name]:.1f}s" for name in TIME_WORDS), total=times["total"]))


def time_breakdown(started: float, clock: dict[str, float], result: Any, checkpoint_seconds: float) -> dict[str, float]:
    """Where the process's time went, in seconds, from the command line's start to the summary.

    `setup` is imports, JAX's start and the run folder; `init` the initial parameters and optimizer state
    (op by op, member by member) and placing them and the data on the devices; `train` the epochs alone;
    `eval` the evaluation after every epoch (and a sweep's best setting's ensemble); `checkpoint` the saves
    and metrics files; `plot` the curves (and importing matplotlib); `other` what is left (building the
    model and optimizer, the summary, the loop itself).
    """
    total = clock["plot_done"] - started
    parts = {"setup": clock["data"] - started, "data": clock["data_done"] - clock["data"],
             "init": result.init_seconds, "compile": result.compile_seconds, "train": result.train_seconds,
             "eval": result.eval_seconds + clock.get("eval_after", 0.0),
             "checkpoint": checkpoint_seconds, "plot": clock["plot_done"] - clock["plot"]}
    return {**parts, "other": max(total - sum(parts.values()), 0.0), "total": total}
