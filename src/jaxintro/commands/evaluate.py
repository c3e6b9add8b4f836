"""`jaxintro evaluate RUN_DIR`: test accuracy, per-class accuracy and a confusion matrix."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxintro.data import load_dataset
from jaxintro.i18n import _, printable
from jaxintro.jsonio import json_text


def run(args: argparse.Namespace) -> int:
    """Evaluate a run on its dataset's test set; plot its confusion matrix."""
    from jaxintro.evaluate import evaluate_run, load_run
    from jaxintro.evaluate import evaluation_lines
    from jaxintro.plots import plot_confusion

    run_dir = Path(args.run_dir)
    loaded = load_run(run_dir, args.setting)
    dataset = load_dataset(loaded.dataset.name, args.data_dir or loaded.config.data_dir)
    report = evaluate_run(loaded, dataset)
    for line in evaluation_lines(loaded, report, run_dir, dataset, chosen=args.setting is not None):
        print(line)
    for name, acc in report["per_class_accuracy"].items():
        print(_("  class {name:<12} {accuracy:6.2f}%").format(name=name, accuracy=100 * acc))
    png: Path | None = run_dir / "confusion.png"
    try:  # the folder may be someone else's, read-only, full, or hold a folder of that name: the numbers stand
        plot_confusion(report["confusion"], dataset.classes, png, title=_(
            "{model} MLP, epoch {epoch}, {dataset} test set").format(
            model=loaded.config.model, epoch=loaded.epoch, dataset=dataset.name))
        print(_("Confusion matrix: {path}").format(path=png))
    except OSError as exc:
        print(_("Confusion matrix not written to {path}: {reason}; the numbers above are the evaluation's").format(
            path=printable(png), reason=printable(exc.strerror or exc)), file=sys.stderr)
        png = None
    if args.json:
        print(json_text({**report, "confusion": report["confusion"].tolist(),
                         "confusion_png": None if png is None else str(png)}))
    return 0
