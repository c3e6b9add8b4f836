"""Using a trained run: reload it, evaluate it per class, predict classes of uint8 images (files: `jaxintro.images`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxintro.checkpoint import abstract_state, config_from_meta, read_meta, restore
from jaxintro.config import EVAL_CHUNK, TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import CheckpointError
from jaxintro.i18n import _
from jaxintro.models import Model, build_model
from jaxintro.train import scale_images


class LoadedRun(NamedTuple):
    """A trained model ready to use (several members: their ensemble, `model` averaging their probabilities)."""

    config: TrainConfig
    model: Model
    params: Any
    epoch: int
    dataset: dict[str, Any]
    member_model: Model | None = None  # one member, for per-member reports; None for a single run

    @property
    def members(self) -> int:
        """How many models the run holds."""
        return self.config.members


def load_run(run_dir: Path) -> LoadedRun:
    """Rebuild the model a run trained and restore its latest parameters (all members, stacked)."""
    from jaxintro.ensemble import ensemble_model
    from jaxintro.optim import build_optimizer

    meta = read_meta(run_dir)
    config = config_from_meta(run_dir, meta)
    info = meta.get("dataset") or {}
    if "features" not in info:
        raise CheckpointError(_("{run_dir}: its checkpoint does not say which data it was trained on; retrain it")
                              .format(run_dir=run_dir))
    model = build_model(config.model, int(info["features"]), config.hidden, len(info["classes"]),
                        dropout=config.dropout)
    state, _meta = restore(run_dir, abstract_state(model, build_optimizer(config, 1), config.members))
    if config.members > 1:
        return LoadedRun(config, ensemble_model(model), state.params, state.epoch, info, member_model=model)
    return LoadedRun(config, model, state.params, state.epoch, info)


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
    if dataset.num_features != int(run.dataset["features"]):
        raise CheckpointError(_(
            "the run was trained on {trained} ({pixels} pixels), not {dataset} ({features}); pass --dataset {trained}"
        ).format(trained=run.dataset["name"], pixels=run.dataset["features"], dataset=dataset.name,
                 features=dataset.num_features))
    predictions = predict_all(run, dataset.x_test).argmax(1)
    k = dataset.num_classes
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (dataset.y_test, predictions), 1)
    per_class = confusion.diagonal() / np.maximum(confusion.sum(1), 1)
    report: dict[str, Any] = {"test_accuracy": float(np.mean(predictions == dataset.y_test)),
                              "per_class_accuracy": {c: float(a) for c, a in zip(dataset.classes, per_class)},
                              "confusion": confusion}
    if run.member_model is not None:
        report["member_test_accuracy"] = member_accuracies(run, dataset)
    return report


def member_accuracies(run: LoadedRun, dataset: Dataset) -> list[float]:
    """Each member's own test accuracy (the members of an ensemble run, one by one)."""
    from jaxintro.ensemble import members_and_ensemble
    from jaxintro.train import jit_count_correct

    correct = jit_count_correct(members_and_ensemble(run.member_model))
    counts, _losses = correct(run.params, jnp.asarray(dataset.x_test), jnp.asarray(dataset.y_test))
    return [int(c) / len(dataset.x_test) for c in np.asarray(counts)[:-1]]  # the last row is the ensemble
