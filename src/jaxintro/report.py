"""What `jaxintro train` and `sweep` print and save about a run: the header, the summary and `result.json`'s
fields, the members' and settings' tables, the plots, and where the time went.

The command (`commands/train.py`) resolves the run and trains it; everything a learner reads about it
is written here, in the chosen language. One model is a run of one member: the summary's numbers
come from the members a run is used through (one model: itself; seeds: all that trained; a sweep:
its best setting's seeds), so every field means the same thing for every kind of run.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from jaxintro.config import TrainConfig
from jaxintro.faults import run_write
from jaxintro.grid import best_setting, choose_members, diverged_in, mean_std, member_grid, settings_of
from jaxintro.i18n import N_, Code, _, format_number, ngettext
from jaxintro.runs import json_safe

# What `fit`'s `compile_cache` says about the training program (the per-epoch or per-step one); translated when printed.
CACHE_WORDS = {"hit": N_("training program loaded from the persistent cache"),
               "miss": N_("training program compiled, then stored in the persistent cache"),
               "off": N_("persistent cache off")}
# The phases of `time_breakdown`, as the summary line names them.
TIME_WORDS = {"setup": N_("set-up"), "start": N_("device start"), "data": N_("data"), "init": N_("init"),
              "compile": N_("compile"), "train": N_("training"), "eval": N_("evaluation"),
              "checkpoint": N_("checkpoints"), "plot": N_("plot"), "other": N_("other")}


def print_header(config: TrainConfig, dataset: Any, run_dir: Path) -> int:
    """The line that says what trains on what, and where it is written; return the devices members spread over."""
    facts = dict(model=config.model, layers="-".join(map(str, (dataset.num_features, *config.hidden,
                                                                dataset.num_classes))),
                 dataset=dataset.name, train=len(dataset.x_train), test=len(dataset.x_test), source=dataset.source,
                 loop=config.loop, run_dir=run_dir)
    line, spread = header(config, facts)
    print(line, flush=True)
    return spread


def plot_curves(config: TrainConfig, dataset: Any, rows: list[dict[str, Any]], run_dir: Path) -> None:
    """`curves.png`: loss and accuracy per epoch (several members: each faint, their mean bold)."""
    from jaxintro.plots import plot_curves as plot  # matplotlib loads after training, off the memory peak

    with run_write("curves.png", run_dir):
        plot(rows, run_dir / "curves.png", title=curves_title(config, dataset))


def summarize(config: TrainConfig, dataset: Any, result: Any, rows: list[dict[str, Any]], run_dir: Path, *,
              spread: int, primary: bool, clock: dict[str, float]) -> dict[str, Any]:
    """The run's summary: `result.json`, and `--json`'s last line (a sweep also draws `sweep.png`)."""
    import jax

    from jaxintro.runtime import peak_rss_mb

    last = rows[-1]
    summary = {
        "dataset": dataset.name,
        "model": config.model,
        "epochs": last["epoch"],
        "param_count": result.param_count,
        **headline_fields(config, last),
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
        summary.update(members_fields(config, last, result, dataset, run_dir, spread=spread, primary=primary,
                                      clock=clock))
    return summary


def used_members(config: TrainConfig, row: dict[str, Any]) -> list[int]:
    """The members a run's numbers are about (one model: itself; seeds: every one; a sweep: its best setting's)."""
    members = member_grid(config)
    if not config.sweep:
        return list(range(len(members)))
    best = best_setting(settings_of(config, row))
    return [k for k, m in enumerate(members) if (m.lr, m.weight_decay) == (best.lr, best.weight_decay)]


def member_values(row: dict[str, Any], name: str) -> list[float | None]:
    """A `metrics.jsonl` row's `name` (test_accuracy, train_accuracy, loss, test_loss) per member: one model's row
    is a row of one member."""
    return row["members"][name] if "members" in row else [row[name]]


def headline_fields(config: TrainConfig, last: dict[str, Any]) -> dict[str, Any]:
    """`test_accuracy`, `train_accuracy` and `final_loss`: means over the members the run is used through (their
    diverged members left out); several members add the test accuracy's standard deviation."""
    used = used_members(config, last)

    def mean_and_std(name: str) -> tuple[float, float]:
        values = member_values(last, name)
        return mean_std([values[k] for k in used])

    test, test_std = mean_and_std("test_accuracy")
    fields = {"test_accuracy": test, "train_accuracy": mean_and_std("train_accuracy")[0],
              "final_loss": mean_and_std("loss")[0]}
    if config.members > 1:
        fields["test_accuracy_std"] = test_std
    return fields


def print_done(config: TrainConfig, summary: dict[str, Any], result: Any, run_dir: Path) -> None:
    """The last two lines: the test accuracy in its sentence, and where the time went."""
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
        parts=", ".join(f"{labels[name]} {format_number(times[name], '.1f')}s"
                        for name in TIME_WORDS), total=times["total"]))


def time_breakdown(started: float, clock: dict[str, float], result: Any, checkpoint_seconds: float) -> dict[str, float]:
    """Where the process's time went, in seconds, from the command line's start to the summary.

    `setup` is imports, JAX's configuration and the run folder; `start` opening the devices (a CPU's at once, an
    accelerator's runtime and chip in seconds); `init` the initial parameters and optimizer state
    (op by op, member by member) and placing them and the data on the devices; `train` the epochs alone;
    `eval` the evaluation after every epoch (and a sweep's best setting's ensemble); `checkpoint` the saves
    and metrics files; `plot` the curves (and importing matplotlib); `other` what is left (building the
    model and optimizer, the summary, the loop itself).
    """
    total = clock["plot_done"] - started
    parts = {"setup": clock["start"] - started, "start": clock["data"] - clock["start"],
             "data": clock["data_done"] - clock["data"],
             "init": result.init_seconds, "compile": result.compile_seconds, "train": result.train_seconds,
             "eval": result.eval_seconds + clock.get("eval_after", 0.0),
             "checkpoint": checkpoint_seconds, "plot": clock["plot_done"] - clock["plot"]}
    return {**parts, "other": max(total - sum(parts.values()), 0.0), "total": total}


# ---------------------------------------------------------------- what a run's report says about its members


def header(config: TrainConfig, facts: dict[str, Any]) -> tuple[str, int]:
    """The line that opens a run (what trains on what), and the devices its members spread over (one model: 1)."""
    if config.members == 1:
        return _("Training {model} MLP {layers} on {dataset} ({train} train / {test} test, from {source}); "
                 "loop={loop}; run folder {run_dir}").format(**facts), 1
    import jax

    from jaxintro.members import member_devices

    spread = member_devices(config)
    platform = jax.default_backend().upper()
    where = (_("all on one {platform} device").format(platform=platform) if spread == 1 else
             ngettext("spread over {devices} {platform} device", "spread over {devices} {platform} devices",
                      spread).format(devices=spread, platform=platform))
    return _("Training {members} {model} MLPs ({grid}) {layers} on {dataset} ({train} train / {test} test, "
             "from {source}); {where}; loop={loop}; run folder {run_dir}").format(
        members=config.members, grid=describe_members(config), where=where, **facts), spread


def curves_title(config: TrainConfig, dataset: Any) -> str:
    """`curves.png`'s title (several members: each drawn faint, their mean bold)."""
    if config.members == 1:
        return _("{model} MLP on {dataset}").format(model=config.model, dataset=dataset.name)
    if config.sweep:  # the bold curve is the seeds of the setting best at each epoch, as its epoch line says
        return _("{members} x {model} MLP on {dataset} (each faint, the best setting's mean bold)").format(
            members=config.members, model=config.model, dataset=dataset.name)
    return _("{members} x {model} MLP on {dataset} (each faint, mean bold)").format(
        members=config.members, model=config.model, dataset=dataset.name)


def accuracy_text(config: TrainConfig, summary: dict[str, Any]) -> str:
    """The run's test accuracy as the Done line says it: one model's, the mean of several, a sweep's best setting."""
    if config.sweep:
        best = summary["best"]
        # The whole setting: two settings of a weight-decay grid share a learning rate.
        setting = f"lr {best['lr']:g}" + (f", wd {best['weight_decay']:g}" if config.decays_weights else "")
        return ngettext("{mean:.2f} ± {std:.2f}% at the best setting ({setting})",
                        "{mean:.2f} ± {std:.2f}% at the best setting ({setting}; its {seeds} seeds' ensemble "
                        "{ensemble:.2f}%)", config.seeds).format(
            mean=100 * best["test_accuracy"], std=100 * best["test_accuracy_std"], setting=setting,
            seeds=config.seeds, ensemble=100 * summary["ensemble_test_accuracy"])
    if config.members > 1:
        trained = sum(member["test_accuracy"] is not None for member in summary["members"])
        if trained < config.members:  # the numbers are those of the members that trained: say how many
            return ngettext("{mean:.2f} ± {std:.2f}% (mean ± std of the {trained} of {members} members that trained; "
                            "its own accuracy is the ensemble's, {ensemble:.2f}%)",
                            "{mean:.2f} ± {std:.2f}% (mean ± std of the {trained} of {members} members that trained; "
                            "their ensemble {ensemble:.2f}%)", trained).format(
                mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], trained=trained,
                members=config.members, ensemble=100 * summary["ensemble_test_accuracy"])
        return _("{mean:.2f} ± {std:.2f}% (mean ± std of {members} members; their ensemble {ensemble:.2f}%)").format(
            mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], members=config.members,
            ensemble=100 * summary["ensemble_test_accuracy"])
    return format_number(summary["test_accuracy"], ".2%")


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
    from jaxintro.members import ensemble_accuracy
    from jaxintro.models import model_for

    accuracies = last["members"]["test_accuracy"]
    choice = choose_members(config, accuracies, diverged_in(last))
    if len(choice.used) == 1:
        return accuracies[choice.used[0]]
    model = model_for(config, dataset.num_features, dataset.num_classes)
    return ensemble_accuracy(model, params, choice.used, dataset.x_test, dataset.y_test)


def members_fields(config: TrainConfig, last: dict[str, Any], result: Any, dataset: Any, run_dir: Path, *,
                   spread: int, primary: bool, clock: dict[str, float]) -> dict[str, Any]:
    """The summary's fields of a run of several members: each member, their ensemble, and a sweep's settings and best
    setting; a sweep's run also draws `sweep.png` and scores the ensemble it is used through, its best setting's
    seeds (timed into `clock["eval_after"]`)."""
    per = last["members"]
    decays = config.decays_weights  # another optimizer's members and settings have no weight decay (null)
    members = [{"seed": m.seed, "lr": m.lr, "weight_decay": m.weight_decay if decays else None,
                "test_accuracy": per["test_accuracy"][k],
                "train_accuracy": per["train_accuracy"][k], "final_loss": per["loss"][k], "test_loss": per["test_loss"][k]}
               for k, m in enumerate(member_grid(config))]
    fields: dict[str, Any] = {
        "members": members, "ensemble_test_accuracy": last.get("ensemble_test_accuracy"),
        "member_count": config.members,
        "samples_per_second_per_model": result.samples_per_second / config.members, "member_devices": spread,
    }
    if not config.sweep:
        return json_safe(fields)
    settings = settings_of(config, last)
    fields["settings"] = [{"lr": s.lr, "weight_decay": s.weight_decay if decays else None, "test_accuracy": s.mean,
                           "test_accuracy_std": s.std, "diverged": s.diverged} for s in settings]
    best = best_setting(settings)
    fields["best"] = {"lr": best.lr, "weight_decay": best.weight_decay if decays else None,
                      "test_accuracy": best.mean, "test_accuracy_std": best.std}
    start = time.perf_counter()
    fields["ensemble_test_accuracy"] = best_setting_ensemble(config, last, result.state.params, dataset)
    clock["eval_after"] = time.perf_counter() - start
    if primary:
        from jaxintro.plots import plot_sweep

        title = ngettext("{model} MLP on {dataset}, {epochs} epoch", "{model} MLP on {dataset}, {epochs} epochs",
                         last["epoch"]).format(model=config.model, dataset=dataset.name, epochs=last["epoch"])
        with run_write("sweep.png", run_dir):
            fields["sweep_png"] = str(plot_sweep(settings, run_dir / "sweep.png", title=title))
    return json_safe(fields)  # a setting whose members all diverged has a NaN mean: null in the JSON


def print_table(config: TrainConfig, summary: dict[str, Any]) -> None:
    """The final table of a run of several models: every member, then (a sweep) every setting and the best one;
    nothing for one model."""
    if config.members == 1:
        return

    def pct(value: float | None) -> str:
        return _("diverged") if value is None or not math.isfinite(value) else format_number(value, "7.2%")

    def decay(value: float) -> str:  # a weight decay means something only to an optimizer that decays the weights
        return f"{value:.2g}" if config.decays_weights else "-"  # a flag's value: as it is typed

    # Column headings, each translated alone; a column widens to fit a longer translation.
    heads = [_("member"), _("seed"), "lr", "wd", _("test acc"), _("train acc"), _("loss")]
    widths = [max(width, len(head)) for head, width in zip(heads, (6, 6, 8, 8, 9, 9, 8))]
    print(" ".join(f"{head:>{width}}" for head, width in zip(heads, widths)))
    for k, m in enumerate(summary["members"]):
        loss = "-" if m["final_loss"] is None else format_number(m["final_loss"], ".4f")
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
            f"{format_number(100 * s['test_accuracy'], '.2f')} ± {format_number(s['test_accuracy_std'], '.2%')}")
        survivors = config.seeds - s["diverged"]
        note = "  " + ngettext("({n} diverged; the mean is of the other {m})", "({n} diverged; the mean is of the "
                               "other {m})", s["diverged"]).format(n=s["diverged"], m=survivors) \
            if s["diverged"] and survivors else "  " + _("(every seed diverged)") if s["diverged"] else ""
        print(f"{s['lr']:>8.2g} {decay(s['weight_decay']):>8} {cell:>{col}}{note}")
    best = summary["best"]
    if config.decays_weights:
        line = _("Best: lr {lr:g}, weight decay {weight_decay:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    else:  # the optimizer does not decay the weights: naming a weight decay would mislead
        line = _("Best: lr {lr:g}: {mean:.2f} ± {std:.2f}%. Plot: {path}")
    print(line.format(lr=Code(best["lr"]), weight_decay=Code(best["weight_decay"]), mean=100 * best["test_accuracy"],
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


# ---------------------------------------------------------------- a trained run's members
