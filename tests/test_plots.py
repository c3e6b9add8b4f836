"""Plots say what they show: whole-number epoch ticks, a labelled colour bar, mistakes marked, nothing overlapping."""

from __future__ import annotations

import numpy as np
import pytest

from jaxintro import plots


@pytest.fixture
def figures(monkeypatch) -> list:
    """Keep each figure instead of saving it."""
    kept: list = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig) or path)
    return kept


ROWS = [{"epoch": e, "loss": 1 / e, "test_loss": 1.1 / e, "train_accuracy": 0.9, "test_accuracy": 0.8}
        for e in (1, 2, 3)]


def test_epoch_axes_have_whole_number_ticks(figures, tmp_path):
    plots.plot_curves(ROWS, tmp_path / "c.png", title="t")
    plots.plot_curves_compare({"a": ROWS, "b": ROWS}, tmp_path / "d.png", title="t")
    for fig in figures:
        fig.canvas.draw()
        for ax in fig.axes:
            assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()


def boxes_overlap(fig) -> list:
    """Pairs of overlapping texts and axes in a drawn figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    if fig._suptitle is not None:
        boxes.append(fig._suptitle.get_window_extent(renderer))
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]


def test_titles_captions_and_images_do_not_overlap(figures, tmp_path):
    plots.plot_curves(ROWS, tmp_path / "c.png", title="a long title " * 4)
    captions = [f"#{i} y=Sandal p=Ankle\nconf 0.99 |g| 1.23e-05" for i in range(16)]
    plots.plot_image_grid(np.zeros((16, 28, 28), np.uint8), captions, tmp_path / "g.png", title="sorted by norm",
                          marked=[i % 3 == 0 for i in range(16)])
    plots.plot_confusion(np.arange(100).reshape(10, 10), [f"class {i}" for i in range(10)], tmp_path / "m.png",
                         title="a title long enough to reach the colour bar of the matrix")
    for fig in figures:
        assert not boxes_overlap(fig)


def test_the_confusion_colour_bar_is_labelled(figures, tmp_path):
    plots.plot_confusion(np.eye(3, dtype=int) * 5, ["a", "b", "c"], tmp_path / "m.png", title="t")
    colorbar_axes = [ax for ax in figures[0].axes if ax.get_label() == "<colorbar>"]
    assert colorbar_axes and colorbar_axes[0].get_ylabel() == "test images"


def test_misclassified_images_are_marked(figures, tmp_path):
    images = np.zeros((3, 8, 8), np.uint8)
    plots.plot_image_grid(images, ["ok", "wrong", "ok"], tmp_path / "g.png", title="t", marked=[False, True, False])
    axes = figures[0].axes
    assert [len(ax.patches) for ax in axes[:3]] == [0, 1, 0]
    assert axes[1].title.get_color() == plots.MISTAKE and axes[0].title.get_color() == "black"
