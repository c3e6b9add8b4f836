"""The record of an epoch: its row of `metrics.jsonl`, its line, and whether training stayed finite.

Below the trainer and both layouts (one model, members), and free of JAX: an epoch's per-step metrics
arrive here as NumPy arrays, with a leading member axis when several models train. One model is a run
of one member; its row keeps the plain fields, a run of several adds each member's numbers.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple, Sequence

import numpy as np

from jaxintro.errors import TrainingDivergedError
from jaxintro.grid import mean_std, spread_shown
from jaxintro.i18n import _, format_number
from jaxintro.jsonio import json_safe

EXPLODED_LOSS = 1e6  # a finite loss above this means training has blown up


class Scores(NamedTuple):
    """A scored set's correct counts and summed losses (one per member, and a last for their ensemble), and its
    size."""

    correct: np.ndarray
    loss: np.ndarray
    count: int


class EpochMetrics(NamedTuple):
    """One epoch's summary, as written to `metrics.jsonl`."""

    epoch: int
    loss: float
    train_accuracy: float
    # None in an epoch whose test set was not scored: a run with held-out images scores it once, after its last epoch.
    test_accuracy: float | None
    test_loss: float | None
    learning_rate: float
    seconds: float
    max_grad_norm: float | None = None  # the epoch's largest gradient norm, in a run that records it
    # Several members: the fields above are means over the members the run is used through (those that have not
    # diverged; a sweep: its best setting's seeds at this epoch, `headline_over`), these are per member.
    members: dict[str, list[float]] | None = None
    ensemble_test_accuracy: float | None = None
    # With `--validation N`: the held-out training images' scores, what a run chooses with (means, as above).
    val_accuracy: float | None = None
    val_loss: float | None = None

    def line(self, total_epochs: int, *, used: Sequence[int] | None = None, label: str = "") -> str:
        """The lesson's per-epoch line, plus the epoch's seconds. Several members: mean +- std over `used` (default
        all; a sweep: its best setting's seeds, named by `label`), and the ensemble when the row has one. The test
        set's part only where the epoch scored it (a run with held-out images: where it ends)."""
        epoch = f"{self.epoch:{len(str(total_epochs)) + 1}d}"
        # The row's own mean: over the members it is used through (a sweep's row is `headline_over` them already).
        validation = "" if self.val_accuracy is None else _(" | Val Acc: {accuracy}").format(
            accuracy=format_number(self.val_accuracy, ".4f"))
        if self.members is None:
            test = "" if self.test_accuracy is None else _(" | Test Acc: {accuracy}").format(
                accuracy=format_number(self.test_accuracy, ".4f"))
            return _("Epoch {epoch} | Loss: {loss:.4f} | Train Acc: {train:.4f}{test}{validation} | lr {lr:.2e} | "
                     "{seconds:.2f}s").format(epoch=epoch, loss=self.loss, train=self.train_accuracy, test=test,
                                              validation=validation, lr=self.learning_rate, seconds=self.seconds)
        chosen = range(len(self.members["loss"])) if used is None else used

        def mean_and_std(name: str) -> str:
            values = [self.members[name][k] for k in chosen]
            mean, std = mean_std(values)
            if not spread_shown(values):  # one value (a setting of one seed, one member left) or none
                return format_number(mean, ".4f")
            return f"{format_number(mean, '.4f')} ± {format_number(std, '.4f')}"

        lrs = [self.members["learning_rate"][k] for k in chosen]
        low, high = (format_number(value, ".2e") for value in (min(lrs), max(lrs)))
        lr = low if low == high else f"{low}..{high}"
        test = "" if self.test_accuracy is None else _(" | Test Acc: {accuracy}").format(
            accuracy=mean_and_std("test_accuracy"))
        if self.ensemble_test_accuracy is not None:
            test += _(" | Ensemble: {accuracy:.4f}").format(accuracy=self.ensemble_test_accuracy)
        return _("Epoch {epoch}{setting} | Loss: {loss} | Train Acc: {train}{test}{validation} | lr {lr} | "
                 "{seconds:.2f}s").format(epoch=epoch, setting=f" | {label}" if label else "", loss=mean_and_std("loss"),
                                          train=mean_and_std("train_accuracy"), test=test, validation=validation,
                                          lr=lr, seconds=self.seconds)

    def as_row(self) -> dict[str, Any]:
        """The row of `metrics.jsonl` (a single run's has no member fields; a diverged member's values are null)."""
        return json_safe({name: value for name, value in self._asdict().items() if value is not None})


def one_model_row(epoch: int, metrics: dict[str, np.ndarray], test: Scores | None, *, learning_rate: float,
                  seconds: float, batch_size: int, validation: Scores | None = None) -> EpochMetrics:
    """One model's epoch summary from its per-step metrics and the test set's scores (None: not scored this epoch).

    The loss and the training accuracy are the epoch's running means over its batches, as they were
    trained (dropout on, each batch scored just before its update), like Flax's MNIST example.
    """
    n_seen = metrics["correct"].shape[-1] * batch_size  # the epoch's steps, full batches only
    train_correct = np.sum(metrics["correct"], axis=-1)
    row = EpochMetrics(epoch, float(np.mean(metrics["loss"])), int(train_correct) / n_seen,
                       None if test is None else int(test.correct) / test.count,
                       None if test is None else float(test.loss) / test.count, learning_rate, seconds,
                       float(np.max(metrics["grad_norm"])) if "grad_norm" in metrics else None)
    if validation is None:
        return row
    return row._replace(val_accuracy=int(validation.correct) / validation.count,
                        val_loss=float(validation.loss) / validation.count)


def members_row(epoch: int, metrics: dict[str, np.ndarray], test: Scores | None, *, learning_rates: Sequence[float],
                seconds: float, batch_size: int, diverged: set[int], validation: Scores | None = None) -> EpochMetrics:
    """Several members' epoch summary: their means with each member's numbers (a diverged member's NaN, not a
    misleading accuracy) and the ensemble's accuracy (the test counts' last row; none when `test` is None)."""
    n_seen = metrics["correct"].shape[-1] * batch_size  # the epoch's steps, full batches only
    per_member = {
        "loss": np.mean(metrics["loss"], axis=1),
        "train_accuracy": np.sum(metrics["correct"], axis=-1) / n_seen,
    }
    if "grad_norm" in metrics:
        per_member["max_grad_norm"] = np.max(metrics["grad_norm"], axis=1)
    if test is not None:
        per_member["test_accuracy"] = np.asarray(test.correct[:-1]) / test.count
        per_member["test_loss"] = np.asarray(test.loss[:-1]) / test.count
    if validation is not None:
        per_member["val_accuracy"] = np.asarray(validation.correct[:-1]) / validation.count
        per_member["val_loss"] = np.asarray(validation.loss[:-1]) / validation.count
    for name, values in per_member.items():
        values = values.astype(np.float64)
        values[list(diverged)] = np.nan
        per_member[name] = values
    means = {name: float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for name, v in per_member.items()}
    return EpochMetrics(epoch, means["loss"], means["train_accuracy"], means.get("test_accuracy"),
                        means.get("test_loss"), max(learning_rates), seconds, means.get("max_grad_norm"),
                        members={**{k: [float(x) for x in v] for k, v in per_member.items()},
                                 "learning_rate": list(learning_rates)},
                        ensemble_test_accuracy=None if test is None else int(test.correct[-1]) / test.count,
                        val_accuracy=means.get("val_accuracy"), val_loss=means.get("val_loss"))


def headline_over(row: EpochMetrics, used: Sequence[int]) -> EpochMetrics:
    """A sweep's row: its headline fields are the means over `used`, the members the run is used through after this
    epoch (its best setting's seeds, as in `result.json`), at their learning rate; no ensemble (its members differ in
    hyper-parameters, and an ensemble of all of them means nothing). Each member's numbers are kept as they are."""
    def mean(name: str) -> float:
        return mean_std([row.members[name][k] for k in used])[0]

    validation = {} if row.val_accuracy is None else {"val_accuracy": mean("val_accuracy"), "val_loss": mean("val_loss")}
    test = {} if row.test_accuracy is None else {"test_accuracy": mean("test_accuracy"), "test_loss": mean("test_loss")}
    norm = {} if row.max_grad_norm is None else {"max_grad_norm": mean("max_grad_norm")}
    return row._replace(loss=mean("loss"), train_accuracy=mean("train_accuracy"), **test, **norm,
                        learning_rate=row.members["learning_rate"][used[0]], ensemble_test_accuracy=None, **validation)


def first_divergence(losses: np.ndarray) -> int | None:
    """The first step (0-based) whose loss is NaN, infinite, or finite but exploded (above `EXPLODED_LOSS`); None if
    none. One rule for one model and for every member: past it the weights mean nothing, whatever the loss reads."""
    bad = np.flatnonzero(~(np.abs(losses) <= EXPLODED_LOSS))  # NaN compares False: bad too
    return int(bad[0]) if bad.size else None


def divergence_text(losses: np.ndarray, step: int, epoch: int, steps_per_epoch: int) -> str:
    """What diverged, where: `loss became nan at epoch 3, step 2 of 11`, or `loss reached 1.1e+15 ...`."""
    value = losses[step]
    what = _("loss became {value}") if not np.isfinite(value) else _("loss reached {value:.3g} (finite, but exploded)")
    return _("{what} at epoch {epoch}, step {step} of {steps}").format(
        what=what.format(value=value), epoch=epoch, step=step + 1, steps=steps_per_epoch)


def check_finite(metrics: dict[str, np.ndarray], unseen_loss: float, epoch: int, steps_per_epoch: int, *,
                 held_out: bool = False) -> None:
    """One model: raise on the first NaN, infinite or exploded loss (naming epoch and step), or a non-finite loss on
    the unseen images (the test set's, or with `held_out` the held-out images')."""
    losses = np.asarray(metrics["loss"], np.float64)
    step = first_divergence(losses)
    if step is not None:
        raise TrainingDivergedError(_("{where}; lower --lr, add --clip-norm 1.0, or use --optimizer adam").format(
            where=divergence_text(losses, step, epoch, steps_per_epoch)))
    if not np.isfinite(unseen_loss):
        raise TrainingDivergedError(_("{where}: the weights overflow on unseen images; lower --lr, add --clip-norm "
                                      "1.0, or use --optimizer adam").format(
            where=unseen_loss_text(unseen_loss, epoch, held_out)))


def unseen_loss_text(value: float, epoch: int, held_out: bool) -> str:
    """`the test loss became inf after epoch 3` (or the held-out loss)."""
    if held_out:
        return _("the held-out loss became {value} after epoch {epoch}").format(value=value, epoch=epoch)
    return _("the test loss became {value} after epoch {epoch}").format(value=value, epoch=epoch)


def check_members_finite(metrics: dict[str, np.ndarray], unseen_loss: np.ndarray, epoch: int, steps_per_epoch: int,
                         diverged: set[int], *, held_out: bool = False) -> None:
    """After an epoch of several members: each member that diverged (`first_divergence`, or a non-finite loss on the
    unseen images, `check_finite`) is warned about once and added to `diverged` (left out of the means and the
    ensemble); all of them is an error, as for one model."""
    losses = np.asarray(metrics["loss"], np.float64)
    steps = [first_divergence(member) for member in losses]
    bad = [m for m, step in enumerate(steps) if step is not None or not np.isfinite(unseen_loss[m])]
    if len(bad) == len(losses):  # named by a member that diverged now (earlier ones are scored as NaN weights)
        last = min(set(bad) - diverged, default=bad[0])
        check_finite({"loss": losses[last]}, float(unseen_loss[last]), epoch, steps_per_epoch, held_out=held_out)
    for m in sorted(set(bad) - diverged):
        where = (divergence_text(losses[m], steps[m], epoch, steps_per_epoch) if steps[m] is not None else
                 unseen_loss_text(unseen_loss[m], epoch, held_out))
        warnings.warn(_("member {member} diverged: {where}; it is reported as NaN and left out of the means and the "
                        "ensemble").format(member=m, where=where), RuntimeWarning, stacklevel=3)
        diverged.add(m)
