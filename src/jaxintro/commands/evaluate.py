"""`jaxintro evaluate RUN_DIR`: test accuracy, per-class accuracy and a confusion matrix."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxintro.i18n import _, ngettext
from jaxintro.runs import json_safe

if TYPE_CHECKING:
    from jaxintro.data import Dataset
    from jaxintro.evaluate import LoadedRun


def run(args: argparse.Namespace) -> int:
    """Evaluate a run on its dataset's test set; plot its confusion matrix."""
    from jaxintro.data import load_dataset
    from jaxintro.evaluate import evaluate_run, load_run
    from jaxintro.plots import plot_confusion

    run_dir = Path(args.run_dir)
    loaded = load_run(run_dir, args.setting)
    dataset = load_dataset(loaded.dataset["name"], args.data_dir or loaded.config.data_dir)
    report = evaluate_run(loaded, dataset)
    png = plot_confusion(report["confusion"], dataset.classes, run_dir / "confusion.png",
                         title=_("{model} MLP, epoch {epoch}, {dataset} test set").format(
                             model=loaded.config.model, epoch=loaded.epoch, dataset=dataset.name))
    if loaded.members == 1:
        print(ngettext("{run_dir}: {model} MLP after {epochs} epoch on {dataset}",
                       "{run_dir}: {model} MLP after {epochs} epochs on {dataset}", loaded.epoch).format(
            run_dir=run_dir, model=loaded.config.model, epochs=loaded.epoch, dataset=dataset.name))
        print(_("Test accuracy: {accuracy:.2f}% ({count} images)").format(
            accuracy=100 * report["test_accuracy"], count=len(dataset.x_test)))
    else:
        print_members(loaded, report, run_dir, dataset, chosen=args.setting is not None)
    for name, acc in report["per_class_accuracy"].items():
        print(_("  class {name:<12} {accuracy:6.2f}%").format(name=name, accuracy=100 * acc))
    print(_("Confusion matrix: {path}").format(path=png))
    if args.json:
        print(json.dumps(json_safe({**report, "confusion": report["confusion"].tolist(), "confusion_png": str(png)})))
    return 0


def print_members(loaded: "LoadedRun", report: dict[str, Any], run_dir: Path, dataset: "Dataset", *,
                  chosen: bool) -> None:
    """Each member's accuracy (a diverged one says so), their mean, and what the run predicts with."""
    from jaxintro.ensemble import mean_std, member_grid, setting_name

    print(ngettext("{run_dir}: {members} {model} MLPs after {epochs} epoch on {dataset}",
                   "{run_dir}: {members} {model} MLPs after {epochs} epochs on {dataset}", loaded.epoch).format(
        run_dir=run_dir, members=loaded.members, model=loaded.config.model, epochs=loaded.epoch, dataset=dataset.name))
    accuracies = report["member_test_accuracy"]
    for k, (member, acc) in enumerate(zip(member_grid(loaded.config), accuracies)):
        score = _("diverged") if not math.isfinite(acc) else f"{100 * acc:6.2f}%"
        print(_("  member {k:>3} (seed {seed}, lr {lr:g}): {accuracy}").format(
            k=k, seed=member.seed, lr=member.lr, accuracy=score))
    mean, std = mean_std(accuracies)
    print(_("Members: {mean:.2f} ± {std:.2f}% (mean ± std of those that trained)").format(
        mean=100 * mean, std=100 * std))
    setting = loaded.choice.setting
    if setting is not None:  # a sweep: the setting it is used through, with the figures `sweep` printed for it
        print(_("Setting used: {setting} ({how}): its seeds {mean:.2f} ± {std:.2f}%").format(
            setting=setting_name(loaded.config, setting),
            how=_("chosen with --setting") if chosen else _("the best; choose another with --setting"),
            mean=100 * setting.mean, std=100 * setting.std))
    print(_("Test accuracy of {what}: {accuracy:.2f}% ({count} images; the per-class figures and the confusion "
            "matrix below are its)").format(what=loaded.describe_use(),
                                                       accuracy=100 * report["test_accuracy"],
                                                       count=len(dataset.x_test)))
