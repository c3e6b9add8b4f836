"""Using a trained run: reload it, evaluate it per class, and predict digits in image files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxintro.checkpoint import abstract_state, load_config, read_meta, restore
from jaxintro.config import TrainConfig
from jaxintro.data import Dataset
from jaxintro.errors import CheckpointError, DataError
from jaxintro.models import Model, build_model
from jaxintro.train import scale_images

MNIST_BOX = 20  # MNIST digits are fitted into 20x20, then centred by mass in 28x28


class LoadedRun(NamedTuple):
    """A trained model ready to use."""

    config: TrainConfig
    model: Model
    params: Any
    epoch: int
    dataset: dict[str, Any]


def load_run(run_dir: Path) -> LoadedRun:
    """Rebuild the model a run trained and restore its latest parameters."""
    from jaxintro.optim import build_optimizer

    config = load_config(run_dir)
    info = read_meta(run_dir).get("dataset") or {}
    if "features" not in info:
        raise CheckpointError(f"{run_dir}: its checkpoint does not say which data it was trained on; retrain it")
    model = build_model(config.model, int(info["features"]), config.hidden, len(info["classes"]),
                        dropout=config.dropout)
    state, _ = restore(run_dir, abstract_state(model, build_optimizer(config, 1)))
    return LoadedRun(config, model, state.params, state.epoch, info)


def predict_proba(run: LoadedRun, x_u8: np.ndarray) -> np.ndarray:
    """Class probabilities for uint8 images (N, features)."""
    logits = jax.jit(lambda p, x: run.model.apply(p, scale_images(x), None))(run.params, jnp.asarray(x_u8))
    return np.asarray(jax.nn.softmax(logits))


def evaluate_run(run: LoadedRun, dataset: Dataset) -> dict[str, Any]:
    """Test accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted)."""
    if dataset.num_features != int(run.dataset["features"]):
        raise CheckpointError(
            f"the run was trained on {run.dataset['name']} ({run.dataset['features']} pixels), "
            f"not {dataset.name} ({dataset.num_features}); pass --dataset {run.dataset['name']}"
        )
    predictions = np.concatenate([predict_proba(run, dataset.x_test[i:i + 2000]).argmax(1)
                                  for i in range(0, len(dataset.x_test), 2000)])
    k = dataset.num_classes
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (dataset.y_test, predictions), 1)
    per_class = confusion.diagonal() / np.maximum(confusion.sum(1), 1)
    return {"test_accuracy": float(np.mean(predictions == dataset.y_test)),
            "per_class_accuracy": {c: float(a) for c, a in zip(dataset.classes, per_class)},
            "confusion": confusion}


def load_image(path: Path, image_shape: tuple[int, int]) -> np.ndarray:
    """Read any PNG/JPEG and turn it into an MNIST-like uint8 image: white ink on black, centred by mass."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            gray = np.asarray(img.convert("L"), dtype=np.float32)
    except (UnidentifiedImageError, OSError) as exc:
        raise DataError(f"{path}: not a readable image ({exc}); give a PNG or JPEG file") from None
    # Ink on paper is dark on light: MNIST is light on dark. Judge by the border, the background.
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    if border.mean() > 127:
        gray = 255.0 - gray
    gray = np.clip(gray - np.percentile(border if border.mean() <= 127 else 255.0 - border, 50), 0, 255)
    return fit_like_mnist(gray, image_shape)


def fit_like_mnist(ink: np.ndarray, image_shape: tuple[int, int]) -> np.ndarray:
    """Crop to the ink, scale its longer side to 20/28 of the frame, and centre it by centre of mass."""
    from PIL import Image

    side = image_shape[0]
    rows, cols = np.nonzero(ink > 0.1 * max(ink.max(), 1e-6))
    if rows.size == 0:
        return np.zeros(image_shape, np.uint8).reshape(-1)
    ink = ink[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    box = max(1, round(side * MNIST_BOX / 28))
    scale = box / max(ink.shape)
    size = (max(1, round(ink.shape[1] * scale)), max(1, round(ink.shape[0] * scale)))
    small = np.asarray(Image.fromarray(ink.astype(np.float32), mode="F").resize(size, Image.Resampling.LANCZOS))
    small = np.clip(small, 0, None)
    frame = np.zeros((side, side), np.float32)
    top, left = (side - small.shape[0]) // 2, (side - small.shape[1]) // 2
    frame[top:top + small.shape[0], left:left + small.shape[1]] = small
    # Shift so the centre of mass sits in the middle, as MNIST's preprocessing did.
    total = frame.sum()
    if total > 0:
        ys, xs = np.indices(frame.shape)
        dy = int(round(side / 2 - 0.5 - (ys * frame).sum() / total))
        dx = int(round(side / 2 - 0.5 - (xs * frame).sum() / total))
        frame = np.roll(frame, (dy, dx), axis=(0, 1))
    frame = frame / max(frame.max(), 1e-6) * 255.0
    return frame.round().astype(np.uint8).reshape(-1)
