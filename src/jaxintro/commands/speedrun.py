"""`jaxintro speedrun`: the lesson's MLP to 98 % test accuracy as fast as this machine allows, with the evidence.

The record's recipe trains `--seeds` models as one program (the evidence: their mean, spread and a one-sided
t-test that the mean exceeds the target, p < `--alpha`), then times one model alone, side by side and in turns
(`--rounds`) with the same recipe in PyTorch eager, the lesson's recipe and the lesson's own script. `--ablate`
takes each trick away in turn; `--track accuracy` runs the other record: the best mean accuracy within 60 s.
`--tune` shows how the track's recipe was chosen: every recipe of its grid on seeds 0-7, trained without the
last `--validation` training images and judged on them, never on the test set (the time track also times them).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import statistics
import time
from typing import Any

import numpy as np

from jaxintro import speedrun
from jaxintro.bench_torch import TORCH_MISSING
from jaxintro.config import held_out_count
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError
from jaxintro.i18n import _, format_duration, format_number
from jaxintro.jsonio import json_text
from jaxintro.runs import writable_dir, write_json
from jaxintro.runtime import configure_jax
from jaxintro.speedrun import LESSON, Recipe
from jaxintro.train import hold_out

# The record (`--track time`): the fastest recipe to a mean of 98 %, as `--tune` chose it on held-out images.
RECORD = Recipe(epochs=2, batch_size=256, peak_lr=8e-3, warmup_steps=200, label_smoothing=0.1)
# The other track: the best mean accuracy of the lesson's MLP, no augmentation, within 60 s of training (`--tune`).
ACCURACY = Recipe(epochs=20, batch_size=128, peak_lr=3e-3, warmup_steps=500, label_smoothing=0.1, average=0.999,
                  standardize=True)
# Each trick taken away in turn: its name, and the change to the recipe that takes it away.
ABLATIONS = {
    "no schedule (the peak rate throughout)": {"schedule": "constant"},
    "the lesson's learning rate (peak 1e-3)": {"peak_lr": 1e-3},
    "no label smoothing": {"label_smoothing": 0.0},
    "the lesson's batch (128)": {"batch_size": 128},
    "batch 256": {"batch_size": 256},
    "one program per epoch": {"program": "epoch"},
    "the lesson's loop (host data, a step per call)": {"program": "step"},
}
# The recipes each track's was chosen from (`--tune`): every combination, since the tricks interact. A recipe's
# training time is set by its epochs and batch size (the rest costs nothing measurable), so the time track times
# each (epochs, batch) that passes on the held-out images and takes the fastest, then the highest held-out mean
# within it; the accuracy track takes the highest held-out mean (all of its grid trains within 60 s).
TUNING = {
    "time": tuple(dataclasses.replace(RECORD, epochs=epochs, batch_size=batch, peak_lr=lr, warmup_steps=warmup,
                                      label_smoothing=smooth)
                  for epochs, batch, lr, warmup, smooth in itertools.product((1, 2), (128, 256), (3e-3, 5e-3, 8e-3, 1.2e-2),
                                                                             (100, 200), (0.0, 0.1))),
    "accuracy": tuple(dataclasses.replace(ACCURACY, peak_lr=lr, average=average)
                      for lr, average in itertools.product((1e-3, 2e-3, 3e-3), (0.0, 0.999))),
}
# A recipe field's flag where it is not `--field-name` (as the user may have typed it).
RECIPE_FLAGS = {"peak_lr": "--lr", "standardize": "--[no-]standardize"}
TUNING_SEEDS = 8  # seeds 0-7; the evidence is drawn on others (--first-seed, 100 by default)
# The flags `--tune` has no use for: the recipe's parts (it tries its grid's) and the evidence's seeds and rows.
NOT_TUNED = frozenset(field.name for field in dataclasses.fields(Recipe)) | {"seeds", "first_seed", "ablate",
                                                                             "lesson_epochs"}
TRACKS = {"time": RECORD, "accuracy": ACCURACY}  # each track's recipe
OPTIONAL = {  # tricks the record does not use: what adding each one does (one the recipe has is passed over)
    "+ label smoothing 0.1": {"label_smoothing": 0.1},
    "+ weight average (decay 0.99)": {"average": 0.99},
    "+ standardised inputs": {"standardize": True},
}


def run(args: argparse.Namespace) -> int:
    """Train, time and compare; print the records table; write speedrun.json; `--json` prints the report."""
    if args.tune:
        return tune(args)
    if args.validation is not None:  # the evidence is the test set's; held-out images are for choosing
        raise ConfigError(_("--validation holds images out for --tune, which chooses the recipe; the evidence is "
                            "scored on the test set: add --tune, or drop --validation"))
    recipe = chosen_recipe(args)
    out_dir = writable_dir(args.out, "--out")
    configure_jax(compile_cache=False)  # every compile timed here is a real one
    start = time.perf_counter()
    dataset = load_dataset(args.dataset, args.data_dir)
    load_seconds = time.perf_counter() - start
    if recipe.batch_size > len(dataset.x_train):
        raise ConfigError(_("--batch-size {batch} is larger than the {n} training images: not one step would train")
                          .format(batch=recipe.batch_size, n=len(dataset.x_train)))
    print(_("Speedrun on {dataset}: {recipe}; target {target:.1%} over {seeds} seeds (p < {alpha})").format(
        dataset=dataset.name, recipe=describe(recipe), target=args.target, seeds=args.seeds, alpha=args.alpha))
    report = evidence_report(recipe, dataset, args)
    rows = timed_rows(recipe, dataset, args, report["target_epoch"])
    report.update(headline(report, rows, load_seconds, args.target))
    print_rows(report, rows)
    if args.ablate:
        report["ablation"] = ablation(recipe, dataset, args, report)
    write_json(out_dir / "speedrun.json", report)
    print(_("Numbers: {json}").format(json=out_dir / "speedrun.json"))
    if args.json:
        print(json_text(report))  # an infinite t is null, as in speedrun.json
    return 0


def chosen_recipe(args: argparse.Namespace) -> Recipe:
    """The track's recipe, with any recipe flag given on the command line in place of its own value."""
    recipe = TRACKS[args.track]
    changes = {field.name: getattr(args, field.name) for field in dataclasses.fields(Recipe)
               if getattr(args, field.name, None) is not None}
    recipe = dataclasses.replace(recipe, **changes)
    if recipe.epochs < 1 or recipe.batch_size < 1 or not recipe.peak_lr > 0 or not 0 <= recipe.average < 1 \
            or not 0 <= recipe.label_smoothing < 1:
        raise ConfigError(_("the recipe needs epochs and --batch-size of 1 or more, --lr above 0, and "
                            "--average and --label-smoothing in [0, 1); got {recipe}").format(recipe=describe(recipe)))
    if args.seeds < 2:
        raise ConfigError(_("--seeds must be 2 or more: the t-test needs a spread; got {seeds}").format(
            seeds=args.seeds))
    if args.first_seed + args.seeds - 1 > 2**32 - 1:  # jax.random.key keeps a seed's low 32 bits: 2**32 is seed 0
        raise ConfigError(_("--first-seed {first} --seeds {seeds} goes past the largest seed, {largest}").format(
            first=args.first_seed, seeds=args.seeds, largest=2**32 - 1))
    return recipe


def describe(recipe: Recipe) -> str:
    """The recipe in one line, its parts joined by commas."""
    parts = [_("{epochs} epochs").format(epochs=recipe.epochs), _("batch {batch}").format(batch=recipe.batch_size),
             _("Adam {schedule} peak {lr:g}").format(schedule=recipe.schedule, lr=recipe.peak_lr)]
    if recipe.schedule != "constant":
        parts.append(_("warm-up {steps} steps").format(steps=recipe.warmup_steps))
    if recipe.label_smoothing:
        parts.append(_("label smoothing {alpha:g}").format(alpha=recipe.label_smoothing))
    if recipe.average:
        parts.append(_("weight average {decay:g}").format(decay=recipe.average))
    if recipe.standardize:
        parts.append(_("standardised inputs"))
    return ", ".join(parts + [f"program={recipe.program}"])


def summary(curves: np.ndarray, target: float, alpha: float) -> dict[str, Any]:
    """The seeds' verdict at the end of the recipe's fixed epochs (airbench's rule: not the first epoch that happens
    to pass, which would be a choice made on the test set): mean, spread, t and p there."""
    final = curves[:, -1]
    t, p = speedrun.one_sided_test(final, target)
    reached = bool(p < alpha)
    return {"reached": reached, "target_epoch": curves.shape[1] if reached else None,
            "mean_test_accuracy": float(np.mean(final)), "std": float(np.std(final, ddof=1)), "t_statistic": t,
            "p_value": p, "epoch_mean_test_accuracy": [float(m) for m in curves.mean(axis=0)]}


def evidence_report(recipe: Recipe, dataset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Train the seeds together, print their verdict, and start the report with it."""
    curves = speedrun.evidence(recipe, dataset, args.seeds, args.first_seed)
    verdict = summary(curves, args.target, args.alpha)
    for epoch, mean in enumerate(verdict["epoch_mean_test_accuracy"], 1):
        print(_("  epoch {epoch:>2}: mean test accuracy {mean:.2%} ± {std:.2%}").format(
            epoch=epoch, mean=mean, std=float(np.std(curves[:, epoch - 1], ddof=1))))
    print(_("Seeds {first}-{last}: {mean:.2%} ± {std:.2%} after the recipe's {epochs} epochs; one-sided t-test of "
            "mean > {target:.1%}: t = {t:.2f}, p = {p:.2g}").format(
        first=args.first_seed, last=args.first_seed + args.seeds - 1, mean=verdict["mean_test_accuracy"],
        std=verdict["std"], epochs=recipe.epochs, target=args.target, t=verdict["t_statistic"], p=verdict["p_value"]))
    final = {"final_mean_test_accuracy": float(np.mean(curves[:, -1])), "final_std": float(np.std(curves[:, -1], ddof=1))}
    if args.track == "accuracy":  # this track's result: where the seeds end
        print(_("Seeds {first}-{last} after all {epochs} epochs: {mean:.2%} ± {std:.2%}").format(
            first=args.first_seed, last=args.first_seed + args.seeds - 1, epochs=recipe.epochs,
            mean=final["final_mean_test_accuracy"], std=final["final_std"]))
    return {"track": args.track, "dataset": dataset.name, "target": args.target, "alpha": args.alpha,
            "seeds": args.seeds, "first_seed": args.first_seed, "epochs": recipe.epochs,
            "recipe": dataclasses.asdict(recipe), "seed_test_accuracy": curves[:, -1].tolist(), **verdict, **final}


def timed_rows(recipe: Recipe, dataset: Any, args: argparse.Namespace,
               target_epoch: int | None) -> dict[str, dict[str, Any]]:
    """One model of each row, trained `args.rounds` times in turns: its curve and training seconds per round. A row's
    program is compiled in its first round; the later rounds time the same executable (`speedrun.compile_once`).

    The rows of the record's recipe (JAX's and PyTorch's) reach the target where the seeds' evidence says,
    `target_epoch` (its last epoch, or never); the lesson's rows, which never pass it, where their one model
    first touches it."""
    seed = args.first_seed  # the timed models are the evidence's first seed
    compiled: dict[str, dict[str, Any]] = {"speedrun": {}, "lesson-recipe": {}}  # each row's, kept over its rounds
    jobs = {"speedrun": lambda: speedrun.timed_run(recipe, dataset, seed, compiled["speedrun"])}
    skipped = {}
    if args.track == "time":
        jobs["torch-eager"] = lambda: speedrun.torch_run(recipe, dataset, seed)
        if importlib.util.find_spec("torch") is None:  # said once, before the rounds, not once a round
            skipped["torch-eager"] = _(TORCH_MISSING)
            print(_("torch-eager: skipped, {why}").format(why=skipped["torch-eager"]), flush=True)
        jobs["lesson-recipe"] = lambda: speedrun.timed_run(dataclasses.replace(LESSON, epochs=args.lesson_epochs),
                                                           dataset, seed, compiled["lesson-recipe"])
        jobs["lesson-script"] = lambda: speedrun.lesson_script(dataset, args.lesson_epochs)
    rows: dict[str, dict[str, Any]] = {name: {"rounds": [], **({"skipped": skipped[name]} if name in skipped else {})}
                                       for name in jobs}
    for round_ in range(args.rounds):
        for name, job in jobs.items():
            if name in skipped:
                continue
            print(_("  timing {row} (round {round} of {rounds}) ...").format(row=name, round=round_ + 1,
                                                                            rounds=args.rounds), flush=True)
            rows[name]["rounds"].append(job())
    for name, row in rows.items():
        if row["rounds"]:
            reached = target_epoch if name in ("speedrun", "torch-eager") else speedrun.first_epoch_at(
                row["rounds"][0]["curve"], args.target)
            row.update(row_summary(row["rounds"], reached, name == "speedrun"))
    return rows


def row_summary(rounds: list[dict[str, Any]], epoch: int | None, record: bool) -> dict[str, Any]:
    """A row over its rounds: the median training seconds, their range, its curve, and the time to the target it
    reaches at `epoch` (None: not reached)."""
    seconds = [r["train_seconds"] for r in rounds]
    curve = rounds[0]["curve"]
    median = statistics.median(seconds)
    row = {"epochs": len(curve), "curve": curve, "reached_epoch": epoch, "train_seconds_all_epochs": median,
           "train_seconds_range": [min(seconds), max(seconds)],
           "train_seconds": speedrun.seconds_to(median, len(curve), epoch)}
    if record:  # its compile: the first round's (the others reused its executable)
        row["compile_seconds"] = rounds[0]["compile_seconds"]
        row["setup_seconds"] = statistics.median(r["setup_seconds"] for r in rounds)
    return row


def headline(report: dict[str, Any], rows: dict[str, dict[str, Any]], load_seconds: float,
             target: float) -> dict[str, Any]:
    """The record's one-model time to target (its fixed epochs, when its seeds pass the test), and every row beside
    it."""
    record = rows["speedrun"]
    train = speedrun.seconds_to(record["train_seconds_all_epochs"], record["epochs"], report["target_epoch"])
    fields = {"train_seconds": train, "compile_seconds": record["compile_seconds"], "load_seconds": load_seconds,
              "seconds_with_compile": None if train is None else
              load_seconds + record["setup_seconds"] + record["compile_seconds"] + train,
              "rows": {name: {k: v for k, v in row.items() if k != "rounds"} for name, row in rows.items()}}
    if "lesson-recipe" in rows:
        lesson = rows["lesson-recipe"]["train_seconds_all_epochs"]
        fields["lesson_recipe_train_seconds"] = lesson
        fields["torch_train_seconds"] = rows["torch-eager"].get("train_seconds")
        fields["ratio_to_lesson_recipe"] = None if train is None else train / lesson
    return fields


def seconds_cell(seconds: float, longest: float | None = None) -> str:
    """A cell of the tables' seconds columns, as the language writes numbers: "1.41", or in ms when the row's
    `longest` time (this one's by default) is under a second ("9.2ms": the unit is written where the column's own
    would hide the digits). One unit a row: "0.99 [0.99-1.03]", not "994.0ms [987.9ms-1.03]"."""
    return format_duration(seconds) if (seconds if longest is None else longest) < 1 else format_number(seconds, ".2f")


def print_rows(report: dict[str, Any], rows: dict[str, dict[str, Any]]) -> None:
    """The records table: each row's time to the target, its training time for all its epochs, and its curve."""
    print(_("row            epochs  reached at  to target s  all epochs s (range)       final test acc"))
    for name, row in rows.items():
        if "skipped" in row:
            print(f"{name:<14} " + _("skipped: {reason}").format(reason=row["skipped"]))
            continue
        reached = "-" if row["reached_epoch"] is None else str(row["reached_epoch"])
        low, high = row["train_seconds_range"]
        to_target = "-" if row["train_seconds"] is None else seconds_cell(row["train_seconds"], high)
        print(f"{name:<14} {row['epochs']:>6}  {reached:>10}  {to_target:>11}  "
              f"{seconds_cell(row['train_seconds_all_epochs'], high):>12} "
              f"[{seconds_cell(low, high)}-{seconds_cell(high)}]  "
              f"{format_number(row['curve'][-1], '>14.2%')}")
    if "lesson-script" in rows and "skipped" not in rows["lesson-script"]:
        print(_("lesson-script: the lesson's own script timed whole, its compiles and its float32 copy of the data "
                "included; the other rows compile before their clock starts"))
    if report["train_seconds"] is None:
        print(_("Target not reached: the seeds' mean did not pass the test in {epochs} epochs").format(
            epochs=report["epochs"]))
        return
    print(_("One model to {target:.1%}: {train} of training ({with_compile} with loading the data and "
            "compiling); its seeds passed the test at epoch {epoch}").format(
        target=report["target"], train=format_duration(report["train_seconds"]),
        with_compile=format_duration(report["seconds_with_compile"]), epoch=report["target_epoch"]))
    if "ratio_to_lesson_recipe" in report:
        print(_("{ratio:.2f}x the training time of the lesson's recipe ({lesson} for its {epochs} epochs)").format(
            ratio=report["ratio_to_lesson_recipe"], lesson=format_duration(report["lesson_recipe_train_seconds"]),
            epochs=report["rows"]["lesson-recipe"]["epochs"]))
        torch_seconds = report["torch_train_seconds"]
        if torch_seconds is not None and report["rows"]["speedrun"]["train_seconds"]:
            # Like with like: each one model's own time to the target, the record's row against PyTorch's.
            print(_("PyTorch eager, the same recipe: {torch} to the target, {ratio:.2f}x the record's").format(
                torch=format_duration(torch_seconds),
                ratio=torch_seconds / report["rows"]["speedrun"]["train_seconds"]))


def ablation(recipe: Recipe, dataset: Any, args: argparse.Namespace, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each trick of the recipe taken away (and each unused one added): the seeds' verdict and one model's time."""
    rows = []
    print(_("Ablation: the record's recipe with one change ({seeds} seeds each; one model timed once)").format(
        seeds=args.seeds))
    print(_("change                                          mean ± std         p       reached  to target s  "
            "all epochs s"))
    more = {f"one more epoch ({recipe.epochs + 1})": {"epochs": recipe.epochs + 1}}
    for name, change in {**ABLATIONS, **more, **OPTIONAL}.items():
        changed = dataclasses.replace(recipe, **change)
        if changed == recipe:
            continue
        # Another program trains the same models (tests/test_speedrun.py): the record's evidence holds for it.
        same_models = dataclasses.replace(changed, program=recipe.program) == recipe
        verdict = report if same_models else summary(
            speedrun.evidence(changed, dataset, args.seeds, args.first_seed), args.target, args.alpha)
        timed = speedrun.timed_run(changed, dataset, args.first_seed)
        train = speedrun.seconds_to(timed["train_seconds"], changed.epochs, verdict["target_epoch"])
        row = {"change": name, "recipe": dataclasses.asdict(changed), "train_seconds": train,
               "train_seconds_all_epochs": timed["train_seconds"],
               **{k: verdict[k] for k in ("reached", "target_epoch", "mean_test_accuracy", "std", "p_value")}}
        rows.append(row)
        # One unit a row, chosen by its longer time, all its epochs.
        to_target = "-" if train is None else seconds_cell(train, timed["train_seconds"])
        print(f"{name:<46}  {format_number(row['mean_test_accuracy'], '.2%')} ± {format_number(row['std'], '.2%')}  "
              f"{format_number(row['p_value'], '>8.2g')}  {verdict['target_epoch'] or '-':>7}  {to_target:>11}  "
              f"{seconds_cell(timed['train_seconds']):>12}")
    return rows


def tune(args: argparse.Namespace) -> int:
    """Judge every recipe of the track's grid on held-out training images, print each and the one chosen, write
    tuning.json: how the track's recipe was chosen, with the test set left out."""
    # What the user typed (`cli.given_flags`) that tuning would ignore: a recipe's part, or the evidence's settings.
    ignored = sorted(getattr(args, "given", frozenset()) & NOT_TUNED)
    if ignored:
        raise ConfigError(_("--tune tries every recipe of the track's grid; {flag} has no place in it (drop it, or "
                            "drop --tune to run one recipe)").format(
            flag=RECIPE_FLAGS.get(ignored[0], "--" + ignored[0].replace("_", "-"))))
    out_dir = writable_dir(args.out, "--out")
    configure_jax(compile_cache=False)
    dataset = load_dataset(args.dataset, args.data_dir)
    count = held_out_count(len(dataset.x_train), args.validation)
    trained, (x_held, y_held) = hold_out(dataset, count, max(r.batch_size for r in TUNING[args.track]))
    # The held-out images take the test set's place: the recipes are scored on them, and the test set is not here.
    held = trained._replace(x_test=x_held, y_test=y_held)
    print(_("Tuning the {track} track on {dataset}: {n} recipes, seeds 0-{last}, trained on {train:,} images and "
            "judged on the last {held:,} training images, held out (the test set is not used)").format(
        track=args.track, dataset=dataset.name, n=len(TUNING[args.track]), last=TUNING_SEEDS - 1,
        train=len(held.x_train), held=len(y_held)))
    tried = []
    for recipe in TUNING[args.track]:
        verdict = summary(speedrun.evidence(recipe, held, TUNING_SEEDS, 0), args.target, args.alpha)
        tried.append({"recipe": dataclasses.asdict(recipe), "reached": verdict["reached"],
                      "mean_val_accuracy": verdict["mean_test_accuracy"], "std": verdict["std"],
                      "p_value": verdict["p_value"]})  # `summary` says "test": here, the held-out images
        print(_("  {recipe}: {mean:.2%} ± {std:.2%} held out, p = {p:.2g}{reached}").format(
            recipe=describe(recipe), mean=verdict["mean_test_accuracy"], std=verdict["std"], p=verdict["p_value"],
            reached=_(" (reached)") if verdict["reached"] else ""))
    seconds = cost_seconds(tried, held, args.rounds) if args.track == "time" else {}
    best = chosen_on_held_out(tried, args.track, seconds)
    report = {"track": args.track, "dataset": dataset.name, "validation_images": len(y_held),
              "seeds": TUNING_SEEDS, "first_seed": 0, "target": args.target, "alpha": args.alpha, "tried": tried,
              "timed": [{"epochs": epochs, "batch_size": batch, "train_seconds": value}
                                for (epochs, batch), value in seconds.items()],
              "chosen": best["recipe"], "is_the_tracks_recipe": best["recipe"] == dataclasses.asdict(
                  TRACKS[args.track])}
    if not best["reached"]:
        print(_("No recipe reached the target on the held-out images: the one with the highest mean is shown"))
    print(_("Chosen on the held-out images: {recipe} ({mean:.2%} ± {std:.2%}); {same}").format(
        recipe=describe(Recipe(**best["recipe"])), mean=best["mean_val_accuracy"], std=best["std"],
        same=_("the track's recipe") if report["is_the_tracks_recipe"] else _("not the track's recipe")))
    write_json(out_dir / "tuning.json", report)
    print(_("Numbers: {json}").format(json=out_dir / "tuning.json"))
    if args.json:
        print(json_text(report))
    return 0


def cost(recipe: dict[str, Any]) -> tuple[int, int]:
    """What sets a recipe's training time: its epochs and its batch size."""
    return recipe["epochs"], recipe["batch_size"]


def cost_seconds(tried: list[dict[str, Any]], held: Any, rounds: int) -> dict[tuple[int, int], float]:
    """One model's median training seconds (seed 0, `rounds` runs, in turns) for each (epochs, batch) with a recipe
    that passed: the first such recipe stands for its class."""
    stands = {}
    for t in tried:
        if t["reached"]:
            stands.setdefault(cost(t["recipe"]), Recipe(**t["recipe"]))
    runs: dict[tuple[int, int], list[float]] = {key: [] for key in stands}
    compiled: dict[tuple[int, int], dict[str, Any]] = {key: {} for key in stands}  # each compiled once
    for _round in range(rounds):
        for key, recipe in stands.items():
            runs[key].append(speedrun.timed_run(recipe, held, 0, compiled[key])["train_seconds"])
    seconds = {key: statistics.median(values) for key, values in runs.items()}
    for (epochs, batch), value in seconds.items():
        print(_("  {epochs} epochs of batch {batch}: {seconds} of training (median of {rounds})").format(
            epochs=epochs, batch=batch, seconds=format_duration(value), rounds=rounds))
    return seconds


def chosen_on_held_out(tried: list[dict[str, Any]], track: str,
                       seconds: dict[tuple[int, int], float]) -> dict[str, Any]:
    """The time track's choice: the fastest (epochs, batch) of those that reach the target (`seconds`), then the
    highest held-out mean in it (none reached: the highest mean); the accuracy track's: the highest mean. Ties go
    to the recipe listed first."""
    if track == "time" and any(t["reached"] for t in tried):
        fastest = min(seconds, key=seconds.get)
        tried = [t for t in tried if t["reached"] and cost(t["recipe"]) == fastest]
    return max(tried, key=lambda t: t["mean_val_accuracy"])
