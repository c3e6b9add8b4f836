"""What a sweep's choice reads when the test set makes it: epoch by epoch, from a run trained with held-out images.

    python scripts/choice_gap.py RUN_DIR

For every epoch of the sweep in RUN_DIR (`jaxintro sweep`, which holds out images by default): the setting chosen on
the held-out images (what the run does) and its mean test accuracy, the setting the test set would have chosen and
its mean test accuracy, and how many points higher that reads. docs/many-models.md quotes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxintro import grid
from jaxintro.config import TrainConfig
from jaxintro.runs import RESOLVED_DATASET, read_config, read_metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args()
    fields = read_config(args.run_dir)  # the run folder's bounded, checked readers
    config = TrainConfig.from_json({k: v for k, v in fields.items() if k != RESOLVED_DATASET})
    rows = read_metrics(args.run_dir)
    print(f"{'epoch':>5} {'held-out picks':>15} {'its test':>9} {'test picks':>11} {'its test':>9} {'reads higher':>13}")
    for row in rows:
        if grid.judged_by(row["members"]) != "val_accuracy":
            raise SystemExit(f"{args.run_dir}: epoch {row['epoch']} has no held-out scores (trained with --validation 0?)")
        chosen = grid.chosen_setting(config, row)
        by_test = grid.best_setting(grid.settings_of(config, row, "test_accuracy"))
        print(f"{row['epoch']:>5} {grid.setting_name(config, chosen):>15} {100 * chosen.mean:>8.2f}% "
              f"{grid.setting_name(config, by_test):>11} {100 * by_test.mean:>8.2f}% "
              f"{100 * (by_test.mean - chosen.mean):>+12.2f}")


if __name__ == "__main__":
    main()
