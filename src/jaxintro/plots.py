"""Plots written as PNG files (matplotlib's Agg backend: no display needed).

Their words (axes, legends, titles) are translated as each plot is drawn, in the chosen language.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from jaxintro.grid import member_values  # noqa: E402
from jaxintro.i18n import _, format_number  # noqa: E402
from jaxintro.runs import write_atomic  # noqa: E402

MISTAKE = "tab:red"  # the colour that marks a misclassified image


def _save(fig, path: Path) -> Path:
    """Save a figure as a PNG, atomically and never through a link (`runs.write_atomic`), and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    # Every figure is laid out by constrained layout, which already fits its texts inside: no `bbox_inches="tight"`,
    # which would draw the whole figure a second time to measure it (a sixth of each training's plot).
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, png.getvalue())
    return path


def _series(rows: Sequence[dict], name: str, scale: float = 1.0, k: int | None = None) -> list[float]:
    """`name` of each row (of its member `k`), NaN where the epoch has none: a run with held-out images scores its
    test set once, in its last epoch, which the plot shows as one point."""
    values = [member_values(r, name)[k] if k is not None else r.get(name) for r in rows]
    return [math.nan if v is None else scale * v for v in values]


def plot_curves(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """Loss and train/test accuracy per epoch, and the held-out images' where a run holds some out (several members:
    each one faint, their mean bold)."""
    epochs = [r["epoch"] for r in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    if "members" in rows[0]:
        _plot_members(ax_loss, ax_acc, rows)
    ax_loss.plot(epochs, [r["loss"] for r in rows], "o-", label=_("train loss (epoch mean)"))
    held_out = all(r.get("val_accuracy") is not None for r in rows)  # `--validation N`: what the run chooses with
    ax_loss.plot(epochs, _series(rows, "test_loss"), "s--", label=_("test loss, at the end") if held_out else
                 _("test loss"))
    if held_out:
        ax_loss.plot(epochs, [r["val_loss"] for r in rows], "d:", color="tab:purple", label=_("held-out loss"))
    ax_loss.set_xlabel(_("epoch"))
    ax_loss.set_ylabel(_("cross-entropy"))
    ax_loss.legend()
    ax_acc.plot(epochs, [100 * r["train_accuracy"] for r in rows], "o-", label=_("train"))
    ax_acc.plot(epochs, _series(rows, "test_accuracy", 100), "s--", label=_("test, at the end") if held_out else
                _("test"))
    if held_out:
        ax_acc.plot(epochs, [100 * r["val_accuracy"] for r in rows], "d:", color="tab:purple", label=_("held out"))
    ax_acc.set_xlabel(_("epoch"))
    ax_acc.set_ylabel(_("accuracy (%)"))
    ax_acc.legend()
    _epoch_ticks(ax_loss, ax_acc)
    fig.suptitle(title)
    return _save(fig, path)


def _plot_members(ax_loss, ax_acc, rows: Sequence[dict]) -> None:
    """Every member's curves, thin and faint, under the bold means that `plot_curves` draws next."""
    epochs = [r["epoch"] for r in rows]
    count = len(rows[0]["members"]["loss"])
    for k in range(count):
        faint = dict(lw=0.8, alpha=0.3)
        ax_loss.plot(epochs, _series(rows, "loss", k=k), "-", color="tab:blue", **faint)
        ax_loss.plot(epochs, _series(rows, "test_loss", k=k), ".--", color="tab:orange", **faint)
        ax_acc.plot(epochs, _series(rows, "train_accuracy", 100, k), "-", color="tab:blue", **faint)
        ax_acc.plot(epochs, _series(rows, "test_accuracy", 100, k), ".--", color="tab:orange", **faint)
    if any("ensemble_test_accuracy" in r for r in rows):  # a sweep's rows have none: its members differ
        ax_acc.plot(epochs, _series(rows, "ensemble_test_accuracy", 100), "^-", color="tab:green",
                    label=_("test, ensemble of {count}").format(count=count))


def plot_sweep(settings: Sequence[Any], path: Path, *, title: str = "") -> Path:
    """Mean test accuracy against the learning rate (log scale), one line per weight decay, std as error bars."""
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    decays = sorted({s.weight_decay for s in settings})
    for wd in decays:
        points = sorted((s for s in settings if s.weight_decay == wd), key=lambda s: s.lr)
        label = _("weight decay {value:g}").format(value=wd) if len(decays) > 1 else None
        ax.errorbar([s.lr for s in points], [100 * s.mean for s in points], yerr=[100 * s.std for s in points],
                    fmt="o-", capsize=4, label=label)
    ax.set_xscale("log")
    ax.set_xlabel(_("learning rate"))
    ax.set_ylabel(_("test accuracy (%), mean ± std over seeds"))
    if len(decays) > 1:
        ax.legend()
    ax.set_title(title)
    return _save(fig, path)


def _epoch_ticks(*axes) -> None:
    """Epochs are whole numbers: no tick at 2.5."""
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_curves_compare(runs: dict[str, Sequence[dict]], path: Path, title: str = "") -> Path:
    """Test accuracy and train-test gap per epoch for several runs."""
    fig, (ax_acc, ax_gap) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    for label, rows in runs.items():
        epochs = [r["epoch"] for r in rows]
        ax_acc.plot(epochs, [100 * r["test_accuracy"] for r in rows], "o-", label=label)
        ax_gap.plot(epochs, [100 * (r["train_accuracy"] - r["test_accuracy"]) for r in rows], "o-", label=label)
    ax_acc.set_xlabel(_("epoch"))
    ax_acc.set_ylabel(_("test accuracy (%)"))
    ax_gap.set_xlabel(_("epoch"))
    ax_gap.set_ylabel(_("train - test accuracy (points)"))
    ax_acc.legend()
    ax_gap.legend()
    _epoch_ticks(ax_acc, ax_gap)
    fig.suptitle(title)
    return _save(fig, path)


def plot_bars(names: Sequence[str], values: Sequence[float], path: Path, *, ylabel: str, title: str) -> Path:
    """A labelled bar chart (benchmark rows, model styles)."""
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(names)), 3.8), layout="constrained")
    bars = ax.bar(names, values, color="tab:blue")
    ax.bar_label(bars, labels=[format_number(v, ",.0f") for v in values], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    return _save(fig, path)


def plot_series(series: dict[str, np.ndarray], path: Path, *, xlabel: str, ylabel: str, title: str,
                hline: float | None = None, logy: bool = False) -> Path:
    """Several curves on one axis (per-step gradient norms, say)."""
    fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    for label, values in series.items():
        steps = np.arange(1, len(values) + 1)
        (raw,) = ax.plot(steps, values, lw=0.5, alpha=0.25)  # faint raw values, the smoothed line on top
        # Per-step values are noisy: a running mean over ~1% of the run shows the trend.
        window = max(1, len(values) // 100)
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, lw=1.6, color=raw.get_color(), zorder=3,
                label=_("{label} (running mean)").format(label=label))
    if hline is not None:
        ax.axhline(hline, color="k", ls=":", lw=1, label=_("clip threshold {value:g}").format(value=hline))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def plot_image_grid(images: np.ndarray, captions: Sequence[str], path: Path, *, title: str, cols: int = 8,
                    marked: Sequence[bool] | None = None) -> Path:
    """Images (N, H, W) in a grid, each with a caption; `marked` ones (misclassified) framed and captioned in red."""
    rows = -(-len(images) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.7 * cols, 2.1 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    marked = marked if marked is not None else [False] * len(images)
    for ax, image, caption, mark in zip(axes.flat, images, captions, marked):
        ax.imshow(image, cmap="gray_r" if image.mean() < 128 else "gray")
        ax.set_title(caption, fontsize=7, color=MISTAKE if mark else "black")
        if mark:
            ax.add_patch(plt.Rectangle((-0.5, -0.5), image.shape[1], image.shape[0], fill=False, lw=3,
                                       edgecolor=MISTAKE))
    fig.suptitle(_("{title}  (red: misclassified)").format(title=title) if any(marked) else title)
    return _save(fig, path)


def plot_confusion(matrix: np.ndarray, classes: Sequence[str], path: Path, *, title: str) -> Path:
    """A confusion matrix with counts in each cell."""
    fig, ax = plt.subplots(figsize=(6.5, 5.5), layout="constrained")
    im = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel(_("predicted"))
    ax.set_ylabel(_("true"))
    for (i, j), count in np.ndenumerate(matrix):
        ax.text(j, i, str(count), ha="center", va="center", fontsize=7,
                color="white" if count > matrix.max() / 2 else "black")
    fig.colorbar(im, ax=ax, label=_("test images"))
    ax.set_title(title)
    return _save(fig, path)
