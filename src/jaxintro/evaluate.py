"""Using a trained run: reload it, evaluate it per class, predict classes of uint8 images (files: `jaxintro.images`)."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxintro.checkpoint import abstract_state, config_from_meta, dataset_from_meta, read_meta, restore
from jaxintro.config import EVAL_CHUNK, TrainConfig
from jaxintro.data import Dataset, DatasetInfo
from jaxintro.errors import CheckpointError
from jaxintro.grid import mean_std, member_grid, refuse_setting_of_no_sweep, setting_name, spread_shown
from jaxintro.i18n import _, format_number, ngettext
from jaxintro.lesson import scale_images
from jaxintro.members import member_accuracies, use_run
from jaxintro.memory import check_use_memory
from jaxintro.models import Model, model_for
from jaxintro.optim import build_optimizer
from jaxintro.runtime import set_matmul_precision


class LoadedRun(NamedTuple):
    """A trained model ready to use: one model, or the average of the members it is used through.

    A run of several members predicts with their ensemble (`model` averages their probabilities); a
    sweep with its best setting's seeds (or the setting chosen with `--setting`); never a diverged member.
    """

    config: TrainConfig
    model: Model
    params: Any  # what `model` applies: one model's, or the used members' stacked
    epoch: int
    dataset: DatasetInfo  # what it trained on
    member_model: Model | None = None  # one member, for per-member reports; None for a single run
    all_params: Any = None  # every member, stacked (several members), for per-member reports
    choice: Any = None  # `grid.Choice`: the members used, the setting, the diverged (several members)

    @property
    def members(self) -> int:
        """How many models the run holds."""
        return self.config.members

    def usage_note(self) -> str | None:
        """Which of the run's models answer, in words (`predict`, `serve`, `grads --run` say it); None for one model."""
        return self.describe_use() if self.choice is not None else None

    def describe_use(self) -> str:
        """What predictions come from, in words: e.g. `the ensemble of its 8 members`."""
        if self.choice is None:
            return _("one model")
        used = len(self.choice.used)
        if self.choice.setting is None:
            text = ngettext("its one member that trained", "the ensemble of its {n} members", used).format(n=used)
        else:
            text = ngettext("the setting {setting}, one model", "the setting {setting}, its {n} seeds averaged",
                            used).format(setting=setting_name(self.config, self.choice.setting), n=used)
        if self.choice.left_out:
            text += ", " + ngettext("{n} diverged member left out", "{n} diverged members left out",
                                    self.choice.left_out).format(n=self.choice.left_out)
        return text


def load_run(run_dir: Path, setting: str | None = None) -> LoadedRun:
    """Rebuild the model a run trained and restore its latest parameters (several members: those it is used through)."""
    meta = read_meta(run_dir)
    config = config_from_meta(run_dir, meta)
    set_matmul_precision(config.matmul_precision)  # evaluated as it trained (a TPU's default is one bfloat16 pass)
    info = dataset_from_meta(run_dir, meta)
    if info is None:
        raise CheckpointError(_("{run_dir}: its checkpoint does not say which data it was trained on; retrain it")
                              .format(run_dir=run_dir))
    model = model_for(config, info.features, len(info.classes))
    check_use_memory(run_dir, config, model.sizes)  # from the shapes it declares, before any array is read
    state, meta = restore(run_dir, abstract_state(model, build_optimizer(config, 1), config.members), params_only=True)
    if config.members == 1:
        refuse_setting_of_no_sweep(config, setting)
        return LoadedRun(config, model, state.params, epoch=state.epoch, dataset=info)
    return LoadedRun(config, epoch=state.epoch, dataset=info, **use_run(config, model, state.params, meta, setting))


def predict_proba(run: LoadedRun, x_u8: np.ndarray) -> np.ndarray:
    """Class probabilities for uint8 images (N, features)."""
    return np.asarray(jitted_proba(run.model)(run.params, jnp.asarray(x_u8)))


@functools.lru_cache(maxsize=8)
def jitted_proba(model: Model) -> Callable:
    """`softmax(apply(params, x_u8 / 255))` compiled once per loaded model (and input shape), not once per call."""
    return jax.jit(lambda params, x_u8: jax.nn.softmax(model.apply(params, scale_images(x_u8), None)))


def predict_all(run: LoadedRun, x_u8: np.ndarray, chunk: int = EVAL_CHUNK) -> np.ndarray:
    """Class probabilities for a whole set, `chunk` images at a time (a bounded forward pass, one program)."""
    return np.concatenate([predict_proba(run, x_u8[i:i + chunk]) for i in range(0, len(x_u8), chunk)])


def evaluate_run(run: LoadedRun, dataset: Dataset) -> dict[str, Any]:
    """Test accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted)."""
    if dataset.num_features != run.dataset.features:
        raise CheckpointError(_(
            "the run was trained on {trained} ({pixels} pixels), not {dataset} ({features}); pass --dataset {trained}"
        ).format(trained=run.dataset.name, pixels=run.dataset.features, dataset=dataset.name,
                 features=dataset.num_features))
    predictions = predict_all(run, dataset.x_test).argmax(1)
    k = dataset.num_classes
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (dataset.y_test, predictions), 1)
    per_class = confusion.diagonal() / np.maximum(confusion.sum(1), 1)
    report: dict[str, Any] = {"test_accuracy": float(np.mean(predictions == dataset.y_test)),
                              "per_class_accuracy": {c: float(a) for c, a in zip(dataset.classes, per_class)},
                              "confusion": confusion}
    if run.member_model is not None:  # several members: each one's own accuracy too
        report["member_test_accuracy"] = member_accuracies(run.member_model, run.all_params, run.choice.diverged,
                                                           dataset.x_test, dataset.y_test)
    return report


def evaluation_lines(run: LoadedRun, report: dict[str, Any], run_dir: Path, dataset: Any, *, chosen: bool) -> list[str]:
    """`jaxintro evaluate`'s opening lines: one model's accuracy, or each member's (a diverged one says so), their
    mean, and what the run predicts with (a sweep: the setting, with the figures `sweep` printed for it)."""
    if run.config.members == 1:
        return [ngettext("{run_dir}: {model} MLP after {epochs} epoch on {dataset}",
                         "{run_dir}: {model} MLP after {epochs} epochs on {dataset}", run.epoch).format(
                    run_dir=run_dir, model=run.config.model, epochs=run.epoch, dataset=dataset.name),
                _("Test accuracy: {accuracy:.2f}% ({count} images)").format(
                    accuracy=100 * report["test_accuracy"], count=len(dataset.x_test))]
    lines = [ngettext("{run_dir}: {members} {model} MLPs after {epochs} epoch on {dataset}",
                      "{run_dir}: {members} {model} MLPs after {epochs} epochs on {dataset}", run.epoch).format(
        run_dir=run_dir, members=run.config.members, model=run.config.model, epochs=run.epoch, dataset=dataset.name)]
    accuracies = report["member_test_accuracy"]
    for k, (member, acc) in enumerate(zip(member_grid(run.config), accuracies)):
        score = _("diverged") if not math.isfinite(acc) else format_number(acc, "7.2%")
        lines.append(_("  member {k:>3} (seed {seed}, lr {lr:g}): {accuracy}").format(
            k=k, seed=member.seed, lr=member.lr, accuracy=score))
    setting = run.choice.setting
    if setting is None:
        mean, std = mean_std(accuracies)
        lines.append(_("Members: {mean:.2f} ± {std:.2f}% (mean ± std of those that trained)").format(
            mean=100 * mean, std=100 * std) if spread_shown(accuracies) else
            _("Members: {mean:.2f}% (the only one that trained)").format(mean=100 * mean))
    else:  # a sweep: the setting it is used through, its seeds' mean (never a mean across settings)
        used = [accuracies[k] for k in run.choice.used]
        mean, std = mean_std(used)
        how = _("chosen with --setting") if chosen else _("the best; choose another with --setting")
        lines.append(_("Setting used: {setting} ({how}): its seeds {mean:.2f} ± {std:.2f}%").format(
            setting=setting_name(run.config, setting), how=how, mean=100 * mean, std=100 * std) if spread_shown(used)
            else _("Setting used: {setting} ({how}): {mean:.2f}%").format(
            setting=setting_name(run.config, setting), how=how, mean=100 * mean))
    lines.append(_("Test accuracy of {what}: {accuracy:.2f}% ({count} images; the per-class figures and the confusion "
                   "matrix below are its)").format(what=run.describe_use(), accuracy=100 * report["test_accuracy"],
                                                   count=len(dataset.x_test)))
    return lines
