"""`jaxintro evaluate RUN_DIR`: test accuracy, per-class accuracy and a confusion matrix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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
                         title=f"{loaded.config.model} MLP, epoch {loaded.epoch}, {dataset.name} test set")
    if loaded.members == 1:
        print(f"{run_dir}: {loaded.config.model} MLP after {loaded.epoch} epochs on {dataset.name}")
        print(f"Test accuracy: {100 * report['test_accuracy']:.2f}% ({len(dataset.x_test)} images)")
    else:
        from jaxintro.ensemble import member_grid, mean_std

        print(f"{run_dir}: {loaded.members} {loaded.config.model} MLPs after {loaded.epoch} epochs on {dataset.name}")
        for k, (member, acc) in enumerate(zip(member_grid(loaded.config), report["member_test_accuracy"])):
            print(f"  member {k:>3} (seed {member.seed}, lr {member.lr:g}): {100 * acc:6.2f}%")
        mean, std = mean_std(report["member_test_accuracy"])
        print(f"Members: {100 * mean:.2f} ± {100 * std:.2f}% (mean ± std)")
        print(f"Test accuracy of the ensemble (averaged probabilities; the per-class figures and the confusion "
              f"matrix below are the ensemble's): {100 * report['test_accuracy']:.2f}% ({len(dataset.x_test)} images)")
    for name, acc in report["per_class_accuracy"].items():
        print(f"  class {name:<12} {100 * acc:6.2f}%")
    print(f"Confusion matrix: {png}")
    if args.json:
        print(json.dumps({**report, "confusion": report["confusion"].tolist(), "confusion_png": str(png)}))
    return 0
