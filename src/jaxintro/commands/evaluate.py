"""`jaxintro evaluate RUN_DIR`: test accuracy, per-class accuracy and a confusion matrix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from jaxintro.i18n import _, ngettext


def run(args: argparse.Namespace) -> int:
    """Evaluate a run on its dataset's test set; plot its confusion matrix."""
    from jaxintro.data import load_dataset
    from jaxintro.evaluate import evaluate_run, load_run
    from jaxintro.plots import plot_confusion

    run_dir = Path(args.run_dir)
    loaded = load_run(run_dir)
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
        from jaxintro.ensemble import member_grid, mean_std

        print(ngettext("{run_dir}: {members} {model} MLPs after {epochs} epoch on {dataset}",
                       "{run_dir}: {members} {model} MLPs after {epochs} epochs on {dataset}", loaded.epoch).format(
            run_dir=run_dir, members=loaded.members, model=loaded.config.model, epochs=loaded.epoch,
            dataset=dataset.name))
        for k, (member, acc) in enumerate(zip(member_grid(loaded.config), report["member_test_accuracy"])):
            print(_("  member {k:>3} (seed {seed}, lr {lr:g}): {accuracy:6.2f}%").format(
                k=k, seed=member.seed, lr=member.lr, accuracy=100 * acc))
        mean, std = mean_std(report["member_test_accuracy"])
        print(_("Members: {mean:.2f} ± {std:.2f}% (mean ± std)").format(mean=100 * mean, std=100 * std))
        print(_("Test accuracy of the ensemble (averaged probabilities; the per-class figures and the confusion "
                "matrix below are the ensemble's): {accuracy:.2f}% ({count} images)").format(
            accuracy=100 * report["test_accuracy"], count=len(dataset.x_test)))
    for name, acc in report["per_class_accuracy"].items():
        print(_("  class {name:<12} {accuracy:6.2f}%").format(name=name, accuracy=100 * acc))
    print(_("Confusion matrix: {path}").format(path=png))
    if args.json:
        print(json.dumps({**report, "confusion": report["confusion"].tolist(), "confusion_png": str(png)}))
    return 0
