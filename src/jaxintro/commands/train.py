"""`jaxintro train`: resolve the run (new, resumed, or one process of many), train it, report.

The order matters: every flag and the run folder are checked before JAX starts or data loads, so a
mistake costs a second, not a compile; JAX learns the device count before anything imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from jaxintro.config import TrainConfig, config_from_flags
from jaxintro.errors import ConfigError, JaxintroError, TrainingDivergedError


# What `fit`'s `compile_cache` says about the training program (the per-epoch or per-step one).
CACHE_WORDS = {"hit": "training program loaded from the persistent cache",
               "miss": "training program compiled, then stored in the persistent cache",
               "off": "persistent cache off"}


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This process's place in a multi-process run (one process: coordinator None)."""

    coordinator: str | None = None
    num_processes: int = 1
    process_id: int = 0


def resolve_cluster(args: argparse.Namespace) -> Cluster:
    """`--coordinator/--num-processes/--process-id` checked together, before anything starts."""
    if args.coordinator is None:
        if args.num_processes not in (None, 1) or args.process_id not in (None, 0):
            raise ConfigError("--num-processes and --process-id need --coordinator HOST:PORT")
        return Cluster()
    from jaxintro.parallel import check_coordinator, detect_cluster, distributed_timeout

    distributed_timeout()  # a bad JAXINTRO_DISTRIBUTED_TIMEOUT is refused before anything starts
    if args.coordinator == "auto":
        if args.num_processes is not None or args.process_id is not None:
            raise ConfigError("--coordinator auto takes the process count and id from the scheduler; "
                              "drop --num-processes and --process-id")
        cluster = Cluster(*detect_cluster())
    else:
        cluster = Cluster(args.coordinator, args.num_processes or 1, args.process_id or 0)
    check_coordinator(cluster.coordinator, cluster.num_processes, cluster.process_id)
    return cluster


def resume_config(args: argparse.Namespace, cluster: Cluster) -> tuple[TrainConfig, Path]:
    """`--resume RUN`: its saved config (with `--epochs` and `--data-dir` applied) and its folder.

    JAX is configured here, before anything starts it.
    """
    from jaxintro.checkpoint import config_from_meta, read_meta
    from jaxintro.runs import CONFIG_FILE, read_json
    from jaxintro.runtime import configure_jax

    run_dir = Path(args.resume)
    # JAX must learn the device count before Orbax starts it: read it from the plain config file.
    saved = run_dir / CONFIG_FILE
    configure_jax(devices=read_json(saved).get("devices", 1) if saved.is_file() else 1,
                  compile_cache=not args.no_compile_cache)
    _join(cluster, run_dir, "--resume")
    meta = read_meta(run_dir)
    config = config_from_meta(run_dir, meta)
    check_resume_flags(args, config, run_dir)
    changes: dict[str, Any] = {"epochs": args.epochs} if args.epochs is not None else {}
    if config.dataset == "auto":  # resume on the data the run used, even if `auto` would now pick another
        changes["dataset"] = meta.get("dataset", {}).get("name", "auto")
    if args.data_dir is not None:
        changes["data_dir"] = args.data_dir
    return dataclasses.replace(config, **changes).validate(), run_dir


# What `--resume` can honour: how far to go, where the data and the peers are, and how to report.
RESUME_FLAGS = frozenset({"resume", "epochs", "data_dir", "json", "no_compile_cache", "coordinator",
                          "num_processes", "process_id"})


def check_resume_flags(args: argparse.Namespace, config: TrainConfig, run_dir: Path) -> None:
    """Refuse flags that would silently be ignored by `--resume`, and extending a scheduled run."""
    refused = sorted(getattr(args, "given", frozenset()) - RESUME_FLAGS)
    if refused:
        flags = ", ".join("--" + name.replace("_", "-") for name in refused)
        raise ConfigError(
            f"--resume continues {run_dir} with its own config, so it cannot honour {flags}; drop them, "
            "or start a new run with them (--resume takes --epochs, --data-dir, --json, --no-compile-cache)"
        )
    if args.epochs is not None and args.epochs != config.epochs and config.schedule != "constant":
        # The schedule's shape depends on the total: resumed with another total, the learning rate would jump
        # and the run would be neither the planned one nor the longer one.
        raise ConfigError(
            f"{run_dir} follows a {config.schedule} schedule planned for {config.epochs} epochs; --resume can "
            f"finish it (--epochs {config.epochs}) but not change its length: start a new run with --epochs "
            f"{args.epochs} instead"
        )


def _join(cluster: Cluster, run_dir: Path, flag: str) -> None:
    """Join the other processes, then check that they agree on their count and all see `run_dir`."""
    if cluster.coordinator is not None:
        from jaxintro.parallel import check_cluster, initialize_distributed

        initialize_distributed(cluster.coordinator, cluster.num_processes, cluster.process_id)
        check_cluster(run_dir, flag, cluster.num_processes)


def run(args: argparse.Namespace) -> int:
    """Train a new run or resume one; a new run that fails before its first checkpoint leaves nothing behind."""
    from jaxintro.runs import claim_run_dir, discard_run_dir
    from jaxintro.runtime import configure_jax

    cluster = resolve_cluster(args)
    if args.resume:
        config, run_dir = resume_config(args, cluster)
        return train_run(args, config, run_dir, resuming=True)
    config = config_from_flags(args)
    if cluster.coordinator is not None and args.run_dir is None:
        raise ConfigError("multi-process training needs --run-dir DIR, the same folder for every process")
    # The run folder is claimed before JAX starts or data loads (process 0 claims, before joining: a refusal
    # must not leave the others waiting); from here on, a failure frees it, so the same command works again.
    created = args.run_dir is None or not Path(args.run_dir).exists()
    owner = cluster.process_id == 0
    run_dir = claim_run_dir(args.run_dir) if owner else Path(args.run_dir)
    try:
        configure_jax(devices=config.devices, compile_cache=not args.no_compile_cache)
        _join(cluster, run_dir, "--run-dir")
        return train_run(args, config, run_dir, resuming=False)
    except BaseException:
        if owner:
            discard_run_dir(run_dir, created=created)
        raise


def train_run(args: argparse.Namespace, config: TrainConfig, run_dir: Path, *, resuming: bool) -> int:
    """Train the resolved run, checkpoint every epoch, plot its curves, and print (and save) its summary."""
    import jax

    from jaxintro import runs
    from jaxintro.checkpoint import Checkpointer, abstract_state, restore
    from jaxintro.data import load_dataset
    from jaxintro.runtime import peak_rss_mb
    from jaxintro.signals import GracefulStop
    from jaxintro.train import Trainer, fit

    dataset = load_dataset(config.dataset, config.data_dir)
    rows: list[dict[str, Any]] = []
    state = None
    if resuming:
        trainer = Trainer.create(config, dataset)
        state, meta = restore(run_dir, abstract_state(trainer.model, trainer.tx, config.members))
        rows = list(meta["metrics"])
        if state.epoch >= config.epochs:
            raise ConfigError(f"{run_dir} already has {state.epoch} epochs; pass --epochs N with N > {state.epoch}")
        print(f"Resuming {run_dir} from epoch {state.epoch} to {config.epochs}", flush=True)
    # With several processes, process 0 writes the run folder; every process takes part in checkpoints.
    primary = jax.process_index() == 0
    if primary:
        runs.write_json(run_dir / runs.CONFIG_FILE, {**config.to_json(), "resolved_dataset": dataset.name})
    checkpointer = Checkpointer(run_dir)
    if state is not None and primary:
        checkpointer.discard_after(state.epoch)

    def on_epoch(state, row) -> None:
        rows.append(row.as_row())
        # First the state, then the metrics that describe it.
        checkpointer.save(state, config, rows, {"name": dataset.name, "image_shape": list(dataset.image_shape),
                                                "classes": list(dataset.classes), "features": dataset.num_features})
        if primary:
            runs.write_metrics(run_dir, rows)

    what = f"{config.model} MLP" if config.members == 1 else f"{config.members} {config.model} MLPs ({describe_members(config)})"
    print(f"Training {what} {dataset.num_features}-{'-'.join(map(str, config.hidden))}-"
          f"{dataset.num_classes} on {dataset.name} ({len(dataset.x_train)} train / {len(dataset.x_test)} test, "
          f"from {dataset.source}); loop={config.loop}; run folder {run_dir}", flush=True)
    try:
        with GracefulStop(distributed=jax.process_count() > 1) as stop:
            result = fit(config, dataset, state=state, on_epoch=on_epoch, progress=sys.stderr.isatty(),
                         should_stop=stop.should_stop)
    except TrainingDivergedError as exc:
        kept = f"the last good checkpoint is epoch {rows[-1]['epoch']} in {run_dir}" if rows else "no epoch finished"
        raise TrainingDivergedError(f"{exc}; {kept}") from None
    except Exception as exc:
        if jax.process_count() == 1 or isinstance(exc, JaxintroError):
            raise
        # In a multi-process run a collective (a gradient all-reduce, or Orbax's barrier) failing
        # means a peer died. Leave now: JAX's shutdown barrier would wait for it, then abort.
        kept = f"resume from epoch {rows[-1]['epoch']} with --resume {run_dir}" if rows else "no epoch finished"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        print(f"jaxintro train: error: process {jax.process_index()} lost its peers ({type(exc).__name__}: "
              f"{first}); {kept}", file=sys.stderr, flush=True)
        os._exit(1)
    finally:
        checkpointer.close()
    if primary:
        from jaxintro.plots import plot_curves  # matplotlib loads after training, off the memory peak

        title = f"{config.model} MLP on {dataset.name}"
        if config.members > 1:
            title = f"{config.members} x {title} (each faint, mean bold)"
        plot_curves(rows, run_dir / "curves.png", title=title)

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
    if config.members > 1:
        summary.update(members_summary(config, last, result.samples_per_second))
        if primary and config.sweep:
            from jaxintro.plots import plot_sweep

            summary["sweep_png"] = str(plot_sweep(sweep_settings(config, last), run_dir / "sweep.png",
                                                  title=f"{config.model} MLP on {dataset.name}, {last['epoch']} epochs"))
    if primary:
        runs.write_json(run_dir / runs.RESULT_FILE, summary)
    if config.members > 1:
        print_members(config, last, summary)
    if result.stopped_early:
        print(f"Stopped after epoch {last['epoch']}; continue with: jaxintro train --resume {run_dir}")
        if args.json:
            print(json.dumps(summary))
        return stop.exit_code()
    accuracy = f"{100 * last['test_accuracy']:.2f}%"
    if config.sweep:
        best = summary["best"]
        accuracy = (f"{100 * best['test_accuracy']:.2f} ± {100 * best['test_accuracy_std']:.2f}% at the best setting "
                    f"(lr {best['lr']:g}; ensemble of all {config.members} members {100 * summary['ensemble_test_accuracy']:.2f}%)")
    elif config.members > 1:
        accuracy = (f"{100 * summary['test_accuracy']:.2f} ± {100 * summary['test_accuracy_std']:.2f}% "
                    f"(mean ± std of {config.members} members; their ensemble {100 * summary['ensemble_test_accuracy']:.2f}%)")
    print(f"Done: test accuracy {accuracy} after {last['epoch']} epochs, "
          f"{result.train_seconds:.1f}s training ({result.samples_per_second:,.0f} samples/s), "
          f"compile {result.compile_seconds:.2f}s ({CACHE_WORDS[result.compile_cache]}). "
          f"Curves: {run_dir / 'curves.png'}")
    if args.json:
        print(json.dumps(summary))
    return 0


def describe_members(config: TrainConfig) -> str:
    """`seeds 0..7`, or a sweep's grid in words."""
    seeds = f"seed {config.seed}" if config.seeds == 1 else f"seeds {config.seed}..{config.seed + config.seeds - 1}"
    if not config.sweep:
        return seeds
    grid = [f"lr {', '.join(f'{v:g}' for v in config.lr_grid or (config.lr,))}"]
    if config.weight_decay_grid:
        grid.append(f"weight decay {', '.join(f'{v:g}' for v in config.weight_decay_grid)}")
    return f"{' x '.join(grid)}; {seeds} each"


def sweep_settings(config: TrainConfig, last: dict[str, Any]) -> list:
    """The sweep's settings, each summarised over its seeds, from the last epoch's row."""
    from jaxintro.ensemble import member_grid, summarize_settings

    accuracies = [math.nan if a is None else a for a in last["members"]["test_accuracy"]]
    return summarize_settings(member_grid(config), accuracies)


def members_summary(config: TrainConfig, last: dict[str, Any], samples_per_second: float) -> dict[str, Any]:
    """The JSON fields of a multi-member run: mean +- std, each member, the ensemble (and a sweep's settings)."""
    from jaxintro.ensemble import best_setting, member_grid, mean_std

    per = last["members"]
    mean, std = mean_std(per["test_accuracy"])
    members = [{"seed": m.seed, "lr": m.lr, "weight_decay": m.weight_decay, "test_accuracy": per["test_accuracy"][k],
                "train_accuracy": per["train_accuracy"][k], "final_loss": per["loss"][k], "test_loss": per["test_loss"][k]}
               for k, m in enumerate(member_grid(config))]
    summary: dict[str, Any] = {
        "test_accuracy": mean, "test_accuracy_std": std, "members": members,
        "ensemble_test_accuracy": last["ensemble_test_accuracy"], "member_count": config.members,
        "samples_per_second_per_model": samples_per_second / config.members,
        "train_accuracy": mean_std(per["train_accuracy"])[0], "final_loss": mean_std(per["loss"])[0],
    }
    if config.sweep:
        settings = sweep_settings(config, last)
        summary["settings"] = [{"lr": s.lr, "weight_decay": s.weight_decay, "test_accuracy": s.mean,
                                "test_accuracy_std": s.std, "diverged": s.diverged} for s in settings]
        best = best_setting(settings)
        summary["best"] = {"lr": best.lr, "weight_decay": best.weight_decay, "test_accuracy": best.mean,
                           "test_accuracy_std": best.std}
    return summary


def print_members(config: TrainConfig, last: dict[str, Any], summary: dict[str, Any]) -> None:
    """The final table: every member, then (a sweep) every setting and the best one."""
    def pct(value: float | None) -> str:
        return "diverged" if value is None or not math.isfinite(value) else f"{100 * value:6.2f}%"

    def decay(value: float) -> str:  # only adamw decays the weights
        return f"{value:.2g}" if config.optimizer == "adamw" else "-"

    print(f"{'member':>6} {'seed':>6} {'lr':>8} {'wd':>8} {'test acc':>9} {'train acc':>9} {'loss':>8}")
    for k, m in enumerate(summary["members"]):
        loss = "-" if m["final_loss"] is None else f"{m['final_loss']:.4f}"
        print(f"{k:>6} {m['seed']:>6} {m['lr']:>8.2g} {decay(m['weight_decay']):>8} {pct(m['test_accuracy']):>9} "
              f"{pct(m['train_accuracy']):>9} {loss:>8}")
    print(f"Ensemble (averaged probabilities of the members): {pct(summary['ensemble_test_accuracy']).strip()} test accuracy")
    if not config.sweep:
        return
    print(f"{'lr':>8} {'wd':>8} {'test acc (mean ± std over ' + str(config.seeds) + ' seeds)':>40}")
    for s in summary["settings"]:
        cell = "diverged" if s["test_accuracy"] is None or not math.isfinite(s["test_accuracy"]) else (
            f"{100 * s['test_accuracy']:.2f} ± {100 * s['test_accuracy_std']:.2f}%")
        note = f"  ({s['diverged']} diverged)" if s["diverged"] else ""
        print(f"{s['lr']:>8.2g} {decay(s['weight_decay']):>8} {cell:>40}{note}")
    best = summary["best"]
    print(f"Best: lr {best['lr']:g}, weight decay {best['weight_decay']:g}: {100 * best['test_accuracy']:.2f} ± "
          f"{100 * best['test_accuracy_std']:.2f}%. Plot: {summary['sweep_png']}")
    verdict = compare_with_lesson(summary["settings"], best)
    if verdict:
        print(verdict)


def compare_with_lesson(settings: list[dict[str, Any]], best: dict[str, Any]) -> str | None:
    """Whether the best setting beats the lesson's learning rate by more than the seeds' spread (None if not swept)."""
    lesson_lr = TrainConfig().lr
    lesson = [s for s in settings if s["lr"] == lesson_lr and s["weight_decay"] == best["weight_decay"]]
    if not lesson or lesson[0]["test_accuracy"] is None or not math.isfinite(lesson[0]["test_accuracy"]):
        return None
    base = lesson[0]
    gap = 100 * (best["test_accuracy"] - base["test_accuracy"])
    noise = 100 * math.hypot(best["test_accuracy_std"], base["test_accuracy_std"])
    if best["lr"] == lesson_lr:
        return f"The lesson's lr {lesson_lr:g} is the best of this grid."
    if gap > noise:
        return (f"lr {best['lr']:g} beats the lesson's {lesson_lr:g} by {gap:.2f} points, more than the seeds' "
                f"spread ({noise:.2f}).")
    return (f"No setting beats the lesson's lr {lesson_lr:g} by more than the seeds' spread: the best is {gap:.2f} "
            f"points higher, within {noise:.2f}.")
