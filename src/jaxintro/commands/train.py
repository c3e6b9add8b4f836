"""`jaxintro train`: resolve the run (new, resumed, or one process of many), train it, report.

The order matters: every flag and the run folder are checked before JAX starts or data loads, so a
mistake costs a second, not a compile; JAX learns the device count before anything imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from jaxintro.config import TrainConfig, config_from_flags
from jaxintro.errors import ConfigError, JaxintroError, TrainingDivergedError
from jaxintro.i18n import N_, _, ngettext


# What `fit`'s `compile_cache` says about the training program (the per-epoch or per-step one); translated when printed.
CACHE_WORDS = {"hit": N_("training program loaded from the persistent cache"),
               "miss": N_("training program compiled, then stored in the persistent cache"),
               "off": N_("persistent cache off")}
# The phases of `time_breakdown`, as the summary line names them.
TIME_WORDS = {"setup": N_("set-up"), "data": N_("data"), "init": N_("init"), "compile": N_("compile"),
              "train": N_("training"),
              "eval": N_("evaluation"), "checkpoint": N_("checkpoints"), "plot": N_("plot"), "other": N_("other")}


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
            raise ConfigError(_("--num-processes and --process-id need --coordinator HOST:PORT"))
        return Cluster()
    from jaxintro.parallel import check_coordinator, detect_cluster, distributed_timeout

    distributed_timeout()  # a bad JAXINTRO_DISTRIBUTED_TIMEOUT is refused before anything starts
    if args.coordinator == "auto":
        if args.num_processes is not None or args.process_id is not None:
            raise ConfigError(_("--coordinator auto takes the process count and id from the scheduler; "
                                "drop --num-processes and --process-id"))
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
    from jaxintro.parallel import cpu_devices_wanted
    from jaxintro.runs import CONFIG_FILE, RESOLVED_DATASET, read_json
    from jaxintro.runtime import configure_jax

    run_dir = Path(args.resume)
    # JAX must learn the device count before Orbax starts it: read it from the plain config file.
    saved = run_dir / CONFIG_FILE
    try:
        saved_json = read_json(saved)
        saved_json.pop(RESOLVED_DATASET, None)  # what the run resolved, written beside its config
        known = TrainConfig.from_json(saved_json).validate()
    except (OSError, ValueError, TypeError, AttributeError, ConfigError):  # the checkpoint's config speaks below
        known = TrainConfig()
    check_processes(known, cluster)  # before joining: the others must not wait for a refused process
    configure_jax(devices=known.devices, cpu_devices=cpu_devices_wanted(known), compile_cache=not args.no_compile_cache)
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


# What `--resume` can honour: how far to go, where the data and the peers are, and how to report (`--lang` too).
RESUME_FLAGS = frozenset({"resume", "epochs", "data_dir", "json", "no_compile_cache", "coordinator",
                          "num_processes", "process_id", "lang"})


def check_resume_flags(args: argparse.Namespace, config: TrainConfig, run_dir: Path) -> None:
    """Refuse flags that would silently be ignored by `--resume`, and extending a scheduled run."""
    refused = sorted(getattr(args, "given", frozenset()) - RESUME_FLAGS)
    if refused:
        flags = ", ".join("--" + name.replace("_", "-") for name in refused)
        raise ConfigError(ngettext(
            "--resume continues {run_dir} with its own config, so it cannot honour {flags}; drop it, "
            "or start a new run with it (--resume takes --epochs, --data-dir, --json, --no-compile-cache)",
            "--resume continues {run_dir} with its own config, so it cannot honour {flags}; drop them, "
            "or start a new run with them (--resume takes --epochs, --data-dir, --json, --no-compile-cache)",
            len(refused),
        ).format(run_dir=run_dir, flags=flags))
    if args.epochs is not None and args.epochs != config.epochs and config.schedule != "constant":
        # The schedule's shape depends on the total: resumed with another total, the learning rate would jump
        # and the run would be neither the planned one nor the longer one.
        raise ConfigError(ngettext(
            "{run_dir} follows a {schedule} schedule planned for {epochs} epoch; --resume can finish it "
            "(--epochs {epochs}) but not change its length: start a new run with --epochs {wanted} instead",
            "{run_dir} follows a {schedule} schedule planned for {epochs} epochs; --resume can finish it "
            "(--epochs {epochs}) but not change its length: start a new run with --epochs {wanted} instead",
            config.epochs,
        ).format(run_dir=run_dir, schedule=config.schedule, epochs=config.epochs, wanted=args.epochs))


def check_processes(config: TrainConfig, cluster: Cluster) -> None:
    """Refuse, before joining (the others must not wait for a refused process), what several processes cannot run.

    Several members train in one process: its devices hold them all. The lesson's `--loop python` has no mesh:
    every process would train the whole batch alone, and the first checkpoint could not be written.
    """
    if cluster.num_processes == 1:
        return
    if config.members > 1:
        raise ConfigError(_("several members (--seeds > 1, or a sweep) train in one process, spread over its "
                            "devices; drop --coordinator, --num-processes and --process-id"))
    if config.loop == "python":
        raise ConfigError(_("--loop python is the lesson's single-device loop; a multi-process run splits each batch "
                            "over the processes' devices in the compiled epoch: drop --loop python (or --coordinator)"))


def _join(cluster: Cluster, run_dir: Path, flag: str, on_give_up=lambda: None) -> None:
    """Join the other processes, then check that they agree on their count and all see `run_dir`.

    `on_give_up` runs when a peer never arrives, just before the process exits (a new run frees its folder).
    """
    if cluster.coordinator is not None:
        from jaxintro.parallel import check_cluster, initialize_distributed

        initialize_distributed(cluster.coordinator, cluster.num_processes, cluster.process_id, on_give_up)
        check_cluster(run_dir, flag, cluster.num_processes)


def run(args: argparse.Namespace) -> int:
    """Train a new run or resume one; a new run that fails before its first checkpoint leaves nothing behind."""
    from jaxintro.parallel import cpu_devices_wanted
    from jaxintro.runs import claim_run_dir, discard_run_dir
    from jaxintro.runtime import configure_jax

    cluster = resolve_cluster(args)
    if args.resume:
        config, run_dir = resume_config(args, cluster)
        return train_run(args, config, run_dir, resuming=True)
    config = config_from_flags(args)
    check_processes(config, cluster)
    if cluster.coordinator is not None and args.run_dir is None:
        raise ConfigError(_("multi-process training needs --run-dir DIR, the same folder for every process"))
    # The run folder is claimed before JAX starts or data loads (process 0 claims, before joining: a refusal
    # must not leave the others waiting); from here on, a failure frees it, so the same command works again.
    created = args.run_dir is None or not Path(args.run_dir).exists()
    owner = cluster.process_id == 0
    run_dir = claim_run_dir(args.run_dir) if owner else Path(args.run_dir)
    try:
        configure_jax(devices=config.devices, cpu_devices=cpu_devices_wanted(config),
                      compile_cache=not args.no_compile_cache)
        _join(cluster, run_dir, "--run-dir",
              on_give_up=lambda: discard_run_dir(run_dir, created=created) if owner else None)
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
    from jaxintro.faults import run_write, watch
    from jaxintro.data import load_dataset
    from jaxintro.runtime import peak_rss_mb
    from jaxintro.signals import GracefulStop
    from jaxintro.train import Trainer, fit

    clock = {"data": time.perf_counter()}
    dataset = load_dataset(config.dataset, config.data_dir)
    clock["data_done"] = time.perf_counter()
    checkpoint_seconds = 0.0
    rows: list[dict[str, Any]] = []
    state = None
    if resuming:
        trainer = Trainer.create(config, dataset)
        state, meta = restore(run_dir, abstract_state(trainer.model, trainer.tx, config.members))
        rows = list(meta["metrics"])
        # A run trained to its end but stopped by a failed write before its summary: --resume writes it.
        if state.epoch >= config.epochs and (run_dir / runs.RESULT_FILE).exists():
            raise ConfigError(ngettext("{run_dir} already has {epochs} epoch; pass --epochs N with N > {epochs}",
                                       "{run_dir} already has {epochs} epochs; pass --epochs N with N > {epochs}",
                                       state.epoch).format(run_dir=run_dir, epochs=state.epoch))
        print(_("Resuming {run_dir} from epoch {epoch} to {epochs}").format(
            run_dir=run_dir, epoch=state.epoch, epochs=config.epochs), flush=True)
    # With several processes, process 0 writes the run folder; every process takes part in checkpoints.
    primary = jax.process_index() == 0
    if primary:
        watch(run_dir)  # every later write checks that the folder is still this one
        with run_write(runs.CONFIG_FILE, run_dir):
            runs.write_json(run_dir / runs.CONFIG_FILE, {**config.to_json(), runs.RESOLVED_DATASET: dataset.name})
    # First the state, then the metrics that describe it: metrics.jsonl is written once a step is on disk.
    checkpointer = Checkpointer(run_dir, on_saved=functools.partial(runs.write_metrics, run_dir) if primary else None)
    if state is not None:  # every process: Orbax's delete ends in a barrier of all of them (only process 0 deletes)
        checkpointer.discard_after(state.epoch)
        if primary:  # the metrics of the checkpoint resumed from: a failed write may have left them behind it
            runs.write_metrics(run_dir, rows)

    def on_epoch(state, row) -> None:
        nonlocal checkpoint_seconds
        start = time.perf_counter()  # what the save blocks: the copy off the device (the files are written meanwhile)
        rows.append(row.as_row())
        checkpointer.save(state, config, rows, {"name": dataset.name, "image_shape": list(dataset.image_shape),
                                                "classes": list(dataset.classes), "features": dataset.num_features})
        checkpoint_seconds += time.perf_counter() - start

    facts = dict(model=config.model, layers="-".join(map(str, (dataset.num_features, *config.hidden,
                                                                dataset.num_classes))),
                 dataset=dataset.name, train=len(dataset.x_train), test=len(dataset.x_test), source=dataset.source,
                 loop=config.loop, run_dir=run_dir)
    if config.members == 1:
        print(_("Training {model} MLP {layers} on {dataset} ({train} train / {test} test, from {source}); "
                "loop={loop}; run folder {run_dir}").format(**facts), flush=True)
    else:
        from jaxintro.parallel import member_devices

        spread = member_devices(config)
        platform = jax.default_backend().upper()
        where = (_("all on one {platform} device").format(platform=platform) if spread == 1 else
                 ngettext("spread over {devices} {platform} device", "spread over {devices} {platform} devices",
                          spread).format(devices=spread, platform=platform))
        print(_("Training {members} {model} MLPs ({grid}) {layers} on {dataset} ({train} train / {test} test, "
                "from {source}); {where}; loop={loop}; run folder {run_dir}").format(
            members=config.members, grid=describe_members(config), where=where, **facts), flush=True)
    try:
        with GracefulStop(distributed=jax.process_count() > 1) as stop:
            result = fit(config, dataset, state=state, on_epoch=on_epoch, progress=sys.stderr.isatty(),
                         should_stop=stop.should_stop)
    except TrainingDivergedError as exc:
        if rows:
            message = _("{error}; the last good checkpoint is epoch {epoch} in {run_dir}").format(
                error=exc, epoch=rows[-1]["epoch"], run_dir=run_dir)
        else:
            message = _("{error}; no epoch finished").format(error=exc)
        raise TrainingDivergedError(message) from None
    except Exception as exc:
        if jax.process_count() == 1 or isinstance(exc, JaxintroError):
            raise
        # In a multi-process run a collective (a gradient all-reduce, or Orbax's barrier) failing
        # means a peer died. Leave now: JAX's shutdown barrier would wait for it, then abort.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        facts = dict(process=jax.process_index(), error=f"{type(exc).__name__}: {first}")
        if rows:
            message = _("jaxintro train: error: process {process} lost its peers ({error}); resume from epoch {epoch} "
                        "with --resume {run_dir}").format(epoch=rows[-1]["epoch"], run_dir=run_dir, **facts)
        else:
            message = _("jaxintro train: error: process {process} lost its peers ({error}); no epoch finished").format(
                **facts)
        print(message, file=sys.stderr, flush=True)
        os._exit(1)
    finally:
        start = time.perf_counter()
        checkpointer.close()  # the last epoch's step, still being written
        checkpoint_seconds += time.perf_counter() - start
    clock["plot"] = time.perf_counter()
    if primary:
        from jaxintro.plots import plot_curves  # matplotlib loads after training, off the memory peak

        if config.members == 1:
            title = _("{model} MLP on {dataset}").format(model=config.model, dataset=dataset.name)
        else:
            title = _("{members} x {model} MLP on {dataset} (each faint, mean bold)").format(
                members=config.members, model=config.model, dataset=dataset.name)
        with run_write("curves.png", run_dir):
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
        summary.update(members_summary(config, last, result.samples_per_second), member_devices=spread)
        if config.sweep:  # the ensemble a sweep's run is used through: its best setting's seeds, not every member
            start = time.perf_counter()
            summary["ensemble_test_accuracy"] = best_setting_ensemble(config, last, result.state.params, dataset)
            clock["eval_after"] = time.perf_counter() - start
        if primary and config.sweep:
            from jaxintro.plots import plot_sweep

            title = ngettext("{model} MLP on {dataset}, {epochs} epoch", "{model} MLP on {dataset}, {epochs} epochs",
                             last["epoch"]).format(model=config.model, dataset=dataset.name, epochs=last["epoch"])
            with run_write("sweep.png", run_dir):
                summary["sweep_png"] = str(plot_sweep(sweep_settings(config, last), run_dir / "sweep.png",
                                                      title=title))
    clock["plot_done"] = time.perf_counter()
    summary["time_breakdown"] = time_breakdown(getattr(args, "started", clock["data"]), clock, result,
                                               checkpoint_seconds)
    summary = runs.json_safe(summary)  # a resume that only writes a finished run's files trains no sample: no rate
    if primary:
        with run_write(runs.RESULT_FILE, run_dir):
            runs.write_json(run_dir / runs.RESULT_FILE, summary)
    if config.members > 1:
        print_members(config, summary)
    if result.stopped_early:
        print(_("Stopped after epoch {epoch}; continue with: jaxintro train --resume {run_dir}").format(
            epoch=last["epoch"], run_dir=run_dir))
        if args.json:
            print(json.dumps(summary))
        return stop.exit_code()
    # The accuracy, then the sentence it goes into: one run's, the mean of several, or a sweep's best setting.
    accuracy = f"{100 * last['test_accuracy']:.2f}%"
    if config.sweep:
        best = summary["best"]
        accuracy = ngettext("{mean:.2f} ± {std:.2f}% at the best setting (lr {lr:g})",
                            "{mean:.2f} ± {std:.2f}% at the best setting (lr {lr:g}; its {seeds} seeds' ensemble "
                            "{ensemble:.2f}%)", config.seeds).format(
            mean=100 * best["test_accuracy"], std=100 * best["test_accuracy_std"], lr=best["lr"], seeds=config.seeds,
            ensemble=100 * summary["ensemble_test_accuracy"])
    elif config.members > 1:
        accuracy = _("{mean:.2f} ± {std:.2f}% (mean ± std of {members} members; their ensemble {ensemble:.2f}%)")
        accuracy = accuracy.format(
            mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], members=config.members,
            ensemble=100 * summary["ensemble_test_accuracy"])
    print(ngettext(
        "Done: test accuracy {accuracy} after {epochs} epoch, {seconds:.1f}s training ({rate:,.0f} samples/s), "
        "compile {compile:.2f}s ({cache}). Curves: {curves}",
        "Done: test accuracy {accuracy} after {epochs} epochs, {seconds:.1f}s training ({rate:,.0f} samples/s), "
        "compile {compile:.2f}s ({cache}). Curves: {curves}",
        last["epoch"],
    ).format(accuracy=accuracy, epochs=last["epoch"], seconds=result.train_seconds, rate=result.samples_per_second,
             compile=result.compile_seconds, cache=_(CACHE_WORDS[result.compile_cache]), curves=run_dir / "curves.png"))
    times = summary["time_breakdown"]
    labels = {name: _(word) for name, word in TIME_WORDS.items()}
    print(_("Time: {parts}; {total:.1f}s in all").format(
        parts=", ".join(f"{labels[name]} {times[name]:.1f}s" for name in TIME_WORDS), total=times["total"]))
    if args.json:
        print(json.dumps(summary))
    return 0


def describe_members(config: TrainConfig) -> str:
    """`seeds 0..7`, or a sweep's grid in words."""
    if config.seeds == 1:
        seeds = _("seed {seed}").format(seed=config.seed)
    else:
        seeds = _("seeds {first}..{last}").format(first=config.seed, last=config.seed + config.seeds - 1)
    if not config.sweep:
        return seeds
    lrs = ", ".join(f"{v:g}" for v in config.lr_grid or (config.lr,))
    if not config.weight_decay_grid:
        return _("lr {lrs}; {seeds} each").format(lrs=lrs, seeds=seeds)
    return _("lr {lrs} x weight decay {decays}; {seeds} each").format(
        lrs=lrs, decays=", ".join(f"{v:g}" for v in config.weight_decay_grid), seeds=seeds)


def best_setting_ensemble(config: TrainConfig, last: dict[str, Any], params: Any, dataset: Any) -> float:
    """Test accuracy of the ensemble of the best setting's seeds that trained (one seed: that model's own)."""
    from jaxintro.ensemble import choose_members, ensemble_accuracy
    from jaxintro.models import model_for

    accuracies = last["members"]["test_accuracy"]
    choice = choose_members(config, accuracies, [k for k, a in enumerate(accuracies) if a is None])
    if len(choice.used) == 1:
        return accuracies[choice.used[0]]
    model = model_for(config, dataset.num_features, dataset.num_classes)
    return ensemble_accuracy(model, params, choice.used, dataset.x_test, dataset.y_test)


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
    # Only adamw decays weights: another optimizer's members and settings have no weight decay (null), not a value.
    decays = config.optimizer == "adamw"
    members = [{"seed": m.seed, "lr": m.lr, "weight_decay": m.weight_decay if decays else None,
                "test_accuracy": per["test_accuracy"][k],
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
        summary["settings"] = [{"lr": s.lr, "weight_decay": s.weight_decay if decays else None, "test_accuracy": s.mean,
                                "test_accuracy_std": s.std, "diverged": s.diverged} for s in settings]
        best = best_setting(settings)
        summary["best"] = {"lr": best.lr, "weight_decay": best.weight_decay if decays else None,
                           "test_accuracy": best.mean,
                           "test_accuracy_std": best.std}
        # A sweep's headline is its best setting (as the summary line says), not a mean across settings.
        summary["test_accuracy"], summary["test_accuracy_std"] = best.mean, best.std
    from jaxintro.runs import json_safe

    return json_safe(summary)  # a setting whose members all diverged has a NaN mean: null in the JSON


def print_members(config: TrainConfig, summary: dict[str, Any]) -> None:
    """The final table: every member, then (a sweep) every setting and the best one."""
    def pct(value: float | None) -> str:
        return _("diverged") if value is None or not math.isfinite(value) else f"{100 * value:6.2f}%"

    def decay(value: float) -> str:  # only adamw decays the weights
        return f"{value:.2g}" if config.optimizer == "adamw" else "-"

    # Column headings, each translated alone; a column widens to fit a longer translation.
    heads = [_("member"), _("seed"), "lr", "wd", _("test acc"), _("train acc"), _("loss")]
    widths = [max(width, len(head)) for head, width in zip(heads, (6, 6, 8, 8, 9, 9, 8))]
    print(" ".join(f"{head:>{width}}" for head, width in zip(heads, widths)))
    for k, m in enumerate(summary["members"]):
        loss = "-" if m["final_loss"] is None else f"{m['final_loss']:.4f}"
        cells = [k, m["seed"], f"{m['lr']:.2g}", decay(m["weight_decay"]), pct(m["test_accuracy"]),
                 pct(m["train_accuracy"]), loss]
        print(" ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)))
    if not config.sweep:
        print(_("Ensemble (averaged probabilities of the members): {accuracy} test accuracy").format(
            accuracy=pct(summary["ensemble_test_accuracy"]).strip()))
        return
    spread = ngettext("test acc (mean ± std over {n} seed)", "test acc (mean ± std over {n} seeds)",
                      config.seeds).format(n=config.seeds)
    col = max(40, len(spread))  # a longer translation widens the column
    print(f"{'lr':>8} {'wd':>8} {spread:>{col}}")
    for s in summary["settings"]:
        cell = _("diverged") if s["test_accuracy"] is None or not math.isfinite(s["test_accuracy"]) else (
            f"{100 * s['test_accuracy']:.2f} ± {100 * s['test_accuracy_std']:.2f}%")
        note = "  " + ngettext("({n} diverged)", "({n} diverged)", s["diverged"]).format(n=s["diverged"]) \
            if s["diverged"] else ""
        print(f"{s['lr']:>8.2g} {decay(s['weight_decay']):>8} {cell:>{col}}{note}")
    best = summary["best"]
    if config.optimizer == "adamw":
        line = _("Best: lr {lr:g}, weight decay {weight_decay:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    else:  # only adamw decays the weights: naming a weight decay would mislead
        line = _("Best: lr {lr:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    print(line.format(lr=best["lr"], weight_decay=best["weight_decay"], mean=100 * best["test_accuracy"],
                      std=100 * best["test_accuracy_std"], path=summary["sweep_png"]))
    if config.seeds > 1:  # what `predict`, `serve` and `evaluate` use: the best setting's seeds, averaged
        print(_("Ensemble of the best setting's {seeds} seeds (what predict, serve and evaluate use): {accuracy} "
                "test accuracy").format(seeds=config.seeds, accuracy=pct(summary["ensemble_test_accuracy"]).strip()))
    verdict = compare_with_lesson(summary["settings"], best) if config.seeds > 1 else None  # one seed: no spread
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
        return _("The lesson's lr {lr:g} is the best of this grid.").format(lr=lesson_lr)
    if gap > noise:
        return _("lr {best:g} beats the lesson's {lr:g} by {gap:.2f} points, more than the seeds' spread "
                 "({noise:.2f}).").format(best=best["lr"], lr=lesson_lr, gap=gap, noise=noise)
    return _("No setting beats the lesson's lr {lr:g} by more than the seeds' spread: the best is {gap:.2f} points "
             "higher, within {noise:.2f}.").format(lr=lesson_lr, gap=gap, noise=noise)


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
