"""What a sweep's choice reads when the test set makes it: epoch by epoch, on the sweep `jaxintro sweep` runs.

    python scripts/choice_gap.py --data-dir DIR [--lr 1e-4,3e-4,1e-3,3e-3] [--seeds 2] [--epochs 10] [--dataset D]

`jaxintro sweep` scores its held-out images after every epoch and the test set once, at its end: the test set never
chooses. This script trains the same sweep (the same grid, seeds and held-out images, through `train.fit`) and does
what the sweep refuses to: it scores the test set after every epoch too, to show what that choice would report. Per
epoch: the setting the held-out images choose and its mean test accuracy, the setting the test set would choose and
its mean test accuracy, and how many points higher that reads. docs/many-models.md quotes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from jaxintro import grid, train
from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.parallel import to_host
from jaxintro.record import EpochMetrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir", default=None, help="MNIST's folder (default: the user cache)")
    parser.add_argument("--lr", default="1e-4,3e-4,1e-3,3e-3", help="the learning rates compared")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    config = TrainConfig(dataset=args.dataset, data_dir=args.data_dir, epochs=args.epochs, seeds=args.seeds,
                         lr_grid=tuple(float(lr) for lr in args.lr.split(",")), validation=None)
    dataset = load_dataset(args.dataset, args.data_dir)
    trained, held_out = train.hold_out(dataset, config.validation_images(len(dataset.x_train)), config.batch_size)
    trainer = train.Trainer.create(config, trained)
    score = trainer.jit_eval()
    test = trainer.layout.place_eval((dataset.x_test, dataset.y_test))
    print(f"{'epoch':>5} {'held-out picks':>15} {'its test':>9} {'test picks':>11} {'its test':>9} {'reads higher':>13}")

    def compare(state: Any, row: EpochMetrics) -> None:
        """The two choices after this epoch: the held-out images' (the sweep's) and the test set's (scored here)."""
        scored = row.as_row()
        diverged = grid.diverged_in(scored)
        correct, _loss = to_host(score(state.params, *test, diverged))
        # Per member (the last row is their ensemble); a diverged member's weights still score: it stays diverged.
        scored["members"]["test_accuracy"] = [None if k in diverged else int(c) / len(dataset.y_test)
                                              for k, c in enumerate(correct[:-1])]
        chosen = grid.chosen_setting(config, scored)
        by_test = grid.best_setting(grid.settings_of(config, scored, "test_accuracy"))
        print(f"{row.epoch:>5} {grid.setting_name(config, chosen):>15} {100 * chosen.mean:>8.2f}% "
              f"{grid.setting_name(config, by_test):>11} {100 * by_test.mean:>8.2f}% "
              f"{100 * (by_test.mean - chosen.mean):>+12.2f}", flush=True)

    train.fit(config, trained, trainer=trainer, validation=held_out, on_epoch=compare, log=lambda line: None)


if __name__ == "__main__":
    main()
