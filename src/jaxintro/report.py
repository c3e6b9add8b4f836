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
from jaxintro.grid import (Setting, best_setting, choose_members, chosen_setting, describe_members, diverged_in,
                           judged_by, kind_of, mean_std, member_grid, member_values, seeds_compared, setting_name,
                           settings_of)
from jaxintro.i18n import N_, Code, _, format_number, ngettext
from jaxintro.jsonio import json_safe

# What `fit`'s `compile_cache` says about the training program (the per-epoch or per-step one); translated when printed.
CACHE_WORDS = {"hit": N_("training program loaded from the persistent cache"),
               "miss": N_("training program compiled, then stored in the persistent cache"),
               "off": N_("persistent cache off")}
# The phases of `time_breakdown`, as the summary line names them.
TIME_WORDS = {"setup": N_("set-up"), "start": N_("device start"), "data": N_("data"), "init": N_("init"),
              "compile": N_("compile"), "train": N_("training"), "eval": N_("evaluation"),
              "checkpoint": N_("checkpoints"), "plot": N_("plot"), "other": N_("other")}


def print_header(config: TrainConfig, dataset: Any, run_dir: Path) -> int:
    """The line that says what trains on what, and where it is written (and the held-out images, with
    `--validation`); return the devices members spread over."""
    facts = dict(model=config.model, layers="-".join(map(str, (dataset.num_features, *config.hidden,
                                                                dataset.num_classes))),
                 dataset=dataset.name, train=len(dataset.x_train), test=len(dataset.x_test), source=dataset.source,
                 loop=config.loop, run_dir=run_dir)
    line, spread = header(config, facts)
    print(line, flush=True)
    if config.validation:  # resolved to a count once the data is loaded
        print(_("Held out: the last {n:,} training images, scored after every epoch (Val Acc) to choose with; the test "
                "set chooses nothing and is scored once, after the last epoch").format(n=config.validation), flush=True)
    return spread


def plot_curves(config: TrainConfig, dataset: Any, rows: list[dict[str, Any]], run_dir: Path) -> None:
    """`curves.png`: loss and accuracy per epoch (several members: each faint, their mean bold)."""
    from jaxintro.plots import plot_curves as plot  # `train` began importing it in a thread (matplotlib's import)

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
    summary.update(report_for(config).fields(last, result, dataset, run_dir, spread=spread, primary=primary,
                                             clock=clock))
    return summary


def headline_fields(config: TrainConfig, last: dict[str, Any]) -> dict[str, Any]:
    """`test_accuracy`, `train_accuracy`, `final_loss` (and `val_accuracy` where the run held images out): means
    over the members the run is used through (their diverged members left out); several members add the test
    accuracy's standard deviation."""
    kind = report_for(config)
    used = kind.used_members(last)

    def mean_and_std(name: str) -> tuple[float, float]:
        values = member_values(last, name)
        return mean_std([values[k] for k in used])

    test, test_std = mean_and_std("test_accuracy")
    # `--validation N`: the held-out images' accuracy, which the run chose with, beside the test set's.
    held_out = {"val_accuracy": mean_and_std("val_accuracy")[0]} if last.get("val_accuracy") is not None else {}
    return {"test_accuracy": test, "train_accuracy": mean_and_std("train_accuracy")[0],
            "final_loss": mean_and_std("loss")[0], **held_out, **kind.spread_fields(test_std)}


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
# One class per kind of run (`grid.kind_of`): each answers the same questions, so no reader asks the member count.


class SingleReport:
    """One model: its own numbers, no spread, no table. Its methods are the interface every kind answers."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def used_members(self, row: dict[str, Any]) -> list[int]:
        """The members the run's numbers are about: the one model."""
        return [0]

    def spread_fields(self, test_std: float) -> dict[str, Any]:
        """The headline's spread over members: none for one model."""
        return {}

    def header(self, facts: dict[str, Any]) -> tuple[str, int]:
        """The line that opens the run, and the devices its members spread over (1)."""
        return _("Training {model} MLP {layers} on {dataset} ({train} train / {test} test, from {source}); "
                 "loop={loop}; run folder {run_dir}").format(**facts), 1

    def curves_title(self, dataset: Any) -> str:
        """`curves.png`'s title."""
        return _("{model} MLP on {dataset}").format(model=self.config.model, dataset=dataset.name)

    def accuracy_text(self, summary: dict[str, Any]) -> str:
        """The test accuracy as the Done line says it."""
        return format_number(summary["test_accuracy"], ".2%")

    def fields(self, last: dict[str, Any], result: Any, dataset: Any, run_dir: Path, *, spread: int, primary: bool,
               clock: dict[str, float]) -> dict[str, Any]:
        """The summary's fields beyond the headline: none for one model."""
        return {}

    def print_table(self, summary: dict[str, Any]) -> None:
        """The final table: nothing for one model."""


class SeedsReport(SingleReport):
    """Several seeds of one setting: every member, their mean ± std and their ensemble."""

    def used_members(self, row: dict[str, Any]) -> list[int]:
        """Every member."""
        return list(range(self.config.members))

    def spread_fields(self, test_std: float) -> dict[str, Any]:
        """The test accuracy's standard deviation over the used members."""
        return {"test_accuracy_std": test_std}

    def header(self, facts: dict[str, Any]) -> tuple[str, int]:
        """The line that opens the run (how many models, which grid, on which devices), and the devices they spread
        over."""
        import jax

        from jaxintro.members import member_devices

        config = self.config
        spread = member_devices(config)
        platform = jax.default_backend().upper()
        where = (_("all on one {platform} device").format(platform=platform) if spread == 1 else
                 ngettext("spread over {devices} {platform} device", "spread over {devices} {platform} devices",
                          spread).format(devices=spread, platform=platform))
        return _("Training {members} {model} MLPs ({grid}) {layers} on {dataset} ({train} train / {test} test, "
                 "from {source}); {where}; loop={loop}; run folder {run_dir}").format(
            members=config.members, grid=describe_members(config), where=where, **facts), spread

    def curves_title(self, dataset: Any) -> str:
        """`curves.png`'s title: each member faint, their mean bold."""
        return _("{members} x {model} MLP on {dataset} (each faint, mean bold)").format(
            members=self.config.members, model=self.config.model, dataset=dataset.name)

    def accuracy_text(self, summary: dict[str, Any]) -> str:
        """The mean ± std of the members that trained, and their ensemble's accuracy."""
        members = self.config.members
        trained = sum(member["test_accuracy"] is not None for member in summary["members"])
        if trained == 1:  # no spread to show, and the ensemble is that member
            return _("{mean:.2f}% (the only one of {members} members that trained; it is also their ensemble)").format(
                mean=100 * summary["test_accuracy"], members=members)
        if trained < members:  # the numbers are those of the members that trained: say how many
            return _("{mean:.2f} ± {std:.2f}% (mean ± std of the {trained} of {members} members that trained; their "
                     "ensemble {ensemble:.2f}%)").format(
                mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], trained=trained,
                members=members, ensemble=100 * summary["ensemble_test_accuracy"])
        return _("{mean:.2f} ± {std:.2f}% (mean ± std of {members} members; their ensemble {ensemble:.2f}%)").format(
            mean=100 * summary["test_accuracy"], std=100 * summary["test_accuracy_std"], members=members,
            ensemble=100 * summary["ensemble_test_accuracy"])

    def fields(self, last: dict[str, Any], result: Any, dataset: Any, run_dir: Path, *, spread: int, primary: bool,
               clock: dict[str, float]) -> dict[str, Any]:
        """Each member, their ensemble, the member count and the rate per model."""
        config = self.config
        per = last["members"]
        decays = config.decays_weights  # another optimizer's members and settings have no weight decay (null)
        members = [{"seed": m.seed, "lr": m.lr, "weight_decay": m.weight_decay if decays else None,
                    "test_accuracy": per["test_accuracy"][k], "train_accuracy": per["train_accuracy"][k],
                    "final_loss": per["loss"][k], "test_loss": per["test_loss"][k]}
                   for k, m in enumerate(member_grid(config))]
        return json_safe({
            "members": members, "ensemble_test_accuracy": last.get("ensemble_test_accuracy"),
            "member_count": config.members,
            "samples_per_second_per_model": result.samples_per_second / config.members, "member_devices": spread,
        })

    def print_table(self, summary: dict[str, Any]) -> None:
        """Every member, then their ensemble's accuracy."""
        self.print_members(summary)
        print(_("Ensemble (averaged probabilities of the members): {accuracy} test accuracy").format(
            accuracy=self.pct(summary["ensemble_test_accuracy"]).strip()))

    def print_members(self, summary: dict[str, Any]) -> None:
        """The members' table: seed, learning rate, weight decay, accuracies and loss of each."""
        # Column headings, each translated alone; a column widens to fit a longer translation.
        heads = [_("member"), _("seed"), "lr", "wd", _("test acc"), _("train acc"), _("loss")]
        widths = [max(width, len(head)) for head, width in zip(heads, (6, 6, 8, 8, 9, 9, 8))]
        print(" ".join(f"{head:>{width}}" for head, width in zip(heads, widths)))
        for k, m in enumerate(summary["members"]):
            loss = "-" if m["final_loss"] is None else format_number(m["final_loss"], ".4f")
            cells = [k, m["seed"], f"{m['lr']:.2g}", self.decay(m["weight_decay"]), self.pct(m["test_accuracy"]),
                     self.pct(m["train_accuracy"]), loss]
            print(" ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)))

    @staticmethod
    def pct(value: float | None) -> str:
        """An accuracy in the tables' column, or "diverged"."""
        return _("diverged") if value is None or not math.isfinite(value) else format_number(value, "7.2%")

    def decay(self, value: float) -> str:
        """A weight decay as it is typed; "-" where the optimizer does not decay the weights."""
        return f"{value:.2g}" if self.config.decays_weights else "-"


class SweepReport(SeedsReport):
    """Several settings: every member, every setting's mean ± std, and the best setting (what the run is used
    through)."""

    def used_members(self, row: dict[str, Any]) -> list[int]:
        """The best setting's members (chosen on the held-out images when the run has them)."""
        best = chosen_setting(self.config, row)
        return [k for k, m in enumerate(member_grid(self.config))
                if (m.lr, m.weight_decay) == (best.lr, best.weight_decay)]

    def curves_title(self, dataset: Any) -> str:
        """`curves.png`'s title: the bold curve is the seeds of the setting best at each epoch, as its epoch line
        says."""
        return _("{members} x {model} MLP on {dataset} (each faint, the best setting's mean bold)").format(
            members=self.config.members, model=self.config.model, dataset=dataset.name)

    def accuracy_text(self, summary: dict[str, Any]) -> str:
        """The best setting's mean ± std, the setting, and its seeds' ensemble."""
        config = self.config
        best = summary["best"]
        # The whole setting: two settings of a weight-decay grid share a learning rate.
        setting = f"lr {best['lr']:g}" + (f", wd {best['weight_decay']:g}" if config.decays_weights else "")
        return ngettext("{accuracy} at the best setting ({setting})",
                        "{accuracy} at the best setting ({setting}; its {seeds} seeds' ensemble "
                        "{ensemble:.2f}%)", config.seeds).format(
            accuracy=self.setting_cell(best), setting=setting, seeds=config.seeds,
            ensemble=100 * summary["ensemble_test_accuracy"])

    def fields(self, last: dict[str, Any], result: Any, dataset: Any, run_dir: Path, *, spread: int, primary: bool,
               clock: dict[str, float]) -> dict[str, Any]:
        """The seeds' fields, every setting and the best one; scores the ensemble the run is used through (its best
        setting's seeds, timed into `clock["eval_after"]`) and draws `sweep.png`."""
        config = self.config
        fields = super().fields(last, result, dataset, run_dir, spread=spread, primary=primary, clock=clock)
        decays = config.decays_weights
        settings = settings_of(config, last, "test_accuracy")  # what each setting reports; chosen on `judged_by`
        fields["settings"] = [{"lr": s.lr, "weight_decay": s.weight_decay if decays else None, "test_accuracy": s.mean,
                               "test_accuracy_std": s.std, "diverged": s.diverged} for s in settings]
        best = chosen_setting(config, last)
        fields["best"] = {"lr": best.lr, "weight_decay": best.weight_decay if decays else None,
                          "test_accuracy": best.mean, "test_accuracy_std": best.std, "diverged": best.diverged}
        if judged_by(last["members"]) == "val_accuracy":
            fields.update(held_out_fields(config, last, settings))
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

    def print_table(self, summary: dict[str, Any]) -> None:
        """Every member, every setting, the best one; with several seeds a setting, their ensemble and the verdict
        against the lesson's learning rate."""
        config = self.config
        self.print_members(summary)
        spread = ngettext("test acc (one seed)", "test acc (mean ± std over {n} seeds)",
                          config.seeds).format(n=config.seeds)
        col = max(40, len(spread))  # a longer translation widens the column
        print(f"{'lr':>8} {'wd':>8} {spread:>{col}}")
        for s in summary["settings"]:
            print(f"{s['lr']:>8.2g} {self.decay(s['weight_decay']):>8} {self.setting_cell(s):>{col}}"
                  f"{self.diverged_note(s)}")
        best = summary["best"]
        if config.decays_weights:
            line = _("Best: lr {lr:g}, weight decay {weight_decay:g}: {accuracy}. Plot: {path}")
        else:  # the optimizer does not decay the weights: naming a weight decay would mislead
            line = _("Best: lr {lr:g}: {accuracy}. Plot: {path}")
        print(line.format(lr=Code(best["lr"]), weight_decay=Code(best["weight_decay"]), accuracy=self.setting_cell(best),
                          path=summary["sweep_png"]))
        if "test_chosen" in summary:
            print(held_out_line(config, summary))
        if seeds_compared(config):  # one seed a setting: no ensemble to speak of, and no spread to compare with
            print(_("Ensemble of the best setting's {seeds} seeds (what predict, serve and evaluate use): {accuracy} "
                    "test accuracy").format(seeds=config.seeds,
                                            accuracy=self.pct(summary["ensemble_test_accuracy"]).strip()))
            verdict = compare_with_lesson(summary["settings"], best)
            if verdict:
                print(verdict)

    def setting_cell(self, setting: dict[str, Any]) -> str:
        """A setting's test accuracy: its seeds' mean ± std, the one number of one seed or of the one left (no spread
        to show), or "diverged"."""
        if setting["test_accuracy"] is None or not math.isfinite(setting["test_accuracy"]):
            return _("diverged")
        mean = format_number(100 * setting["test_accuracy"], ".2f")
        if self.config.seeds - setting["diverged"] < 2:
            return f"{mean}%"
        return f"{mean} ± {format_number(100 * setting['test_accuracy_std'], '.2f')}%"

    def diverged_note(self, setting: dict[str, Any]) -> str:
        """After a setting's cell: how many of its seeds diverged (nothing if none)."""
        survivors = self.config.seeds - setting["diverged"]
        if not setting["diverged"]:
            return ""
        if not survivors:
            return "  " + _("(every seed diverged)")
        return "  " + ngettext("({n} diverged; the mean is of the other {m})", "({n} diverged; the mean is of the "
                               "other {m})", setting["diverged"]).format(n=setting["diverged"], m=survivors)


REPORTS = {"single": SingleReport, "seeds": SeedsReport, "sweep": SweepReport}


def report_for(config: TrainConfig) -> SingleReport:
    """How `config`'s kind of run is reported (`grid.kind_of`: one model, seeds, or a sweep)."""
    return REPORTS[kind_of(config)](config)


def header(config: TrainConfig, facts: dict[str, Any]) -> tuple[str, int]:
    """The line that opens a run (what trains on what), and the devices its members spread over (one model: 1)."""
    return report_for(config).header(facts)


def curves_title(config: TrainConfig, dataset: Any) -> str:
    """`curves.png`'s title (several members: each drawn faint, their mean bold)."""
    return report_for(config).curves_title(dataset)


def accuracy_text(config: TrainConfig, summary: dict[str, Any]) -> str:
    """The run's test accuracy as the Done line says it: one model's, the mean of several, a sweep's best setting."""
    return report_for(config).accuracy_text(summary)


def print_table(config: TrainConfig, summary: dict[str, Any]) -> None:
    """The final table of a run of several models: every member, then (a sweep) every setting and the best one;
    nothing for one model."""
    report_for(config).print_table(summary)


def held_out_fields(config: TrainConfig, last: dict[str, Any], settings: list[Any]) -> dict[str, Any]:
    """A sweep that chose on held-out images: how many, the chosen setting's accuracy on them, and the setting the
    test set would have chosen, with the test accuracy it reads (higher, or equal: the lesson's point)."""
    chosen = best_setting(settings_of(config, last))
    by_test = best_setting(settings)
    return {"validation_images": config.validation, "best_val_accuracy": chosen.mean,
            "test_chosen": {"lr": by_test.lr, "weight_decay": by_test.weight_decay if config.decays_weights else None,
                            "test_accuracy": by_test.mean}}


def held_out_line(config: TrainConfig, summary: dict[str, Any]) -> str:
    """The sweep's line on how it chose, and what choosing on the test set would have read."""
    best, by_test = summary["best"], summary["test_chosen"]
    # Named as `--setting` takes it: a weight-decay grid's settings may share their learning rate.
    named = setting_name(config, Setting(by_test["lr"], by_test["weight_decay"] or 0.0, [], math.nan, math.nan))
    facts = dict(n=summary["validation_images"], val=100 * summary["best_val_accuracy"], setting=named,
                 test=100 * by_test["test_accuracy"], gap=100 * (by_test["test_accuracy"] - best["test_accuracy"]))
    if (by_test["lr"], by_test["weight_decay"]) == (best["lr"], best["weight_decay"]):
        return _("Chosen on {n:,} held-out training images ({val:.2f}% there), never on the test set; the test set "
                 "would have chosen the same setting.").format(**facts)
    return _("Chosen on {n:,} held-out training images ({val:.2f}% there), never on the test set. Chosen on the test "
             "set, {setting} would read {test:.2f}%, {gap:+.2f} points: a number its own choice inflates.").format(**facts)


def best_setting_ensemble(config: TrainConfig, last: dict[str, Any], params: Any, dataset: Any) -> float:
    """Test accuracy of the ensemble of the best setting's seeds that trained (one seed: that model's own)."""
    from jaxintro.members import ensemble_accuracy
    from jaxintro.models import model_for

    members = last["members"]
    choice = choose_members(config, members[judged_by(members)], diverged_in(last))
    if len(choice.used) == 1:
        return members["test_accuracy"][choice.used[0]]
    model = model_for(config, dataset.num_features, dataset.num_classes)
    return ensemble_accuracy(model, params, choice.used, dataset.x_test, dataset.y_test)


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
