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


def line_data(ax) -> dict[str, tuple[list, list]]:
    """Each labelled line of `ax` as (x, y) lists, by its legend label."""
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def test_curves_draw_the_loss_and_accuracy_of_every_epoch(figures, tmp_path):
    plots.plot_curves(ROWS, tmp_path / "c.png", title="the run")
    (fig,) = figures
    ax_loss, ax_acc = fig.axes
    assert (ax_loss.get_xlabel(), ax_loss.get_ylabel()) == ("epoch", "cross-entropy")
    assert (ax_acc.get_xlabel(), ax_acc.get_ylabel()) == ("epoch", "accuracy (%)")
    assert line_data(ax_loss) == {"train loss (epoch mean)": ([1, 2, 3], [1, 1 / 2, 1 / 3]),
                                  "test loss": ([1, 2, 3], [1.1, 1.1 / 2, 1.1 / 3])}
    assert line_data(ax_acc) == {"train": ([1, 2, 3], [90.0] * 3), "test": ([1, 2, 3], [80.0] * 3)}
    assert fig._suptitle.get_text() == "the run"


def test_member_curves_are_faint_with_the_mean_and_ensemble_on_top(figures, tmp_path):
    rows = [{**r, "members": {"loss": [1.0, None], "test_loss": [1.0, 2.0], "train_accuracy": [0.5, 0.6],
                              "test_accuracy": [0.4, 0.7]}, "ensemble_test_accuracy": 0.75} for r in ROWS]
    plots.plot_curves(rows, tmp_path / "c.png")
    ax_loss, ax_acc = figures[0].axes
    # Two members: two faint lines each for loss and test loss, then the two bold means.
    assert len(ax_loss.get_lines()) == 2 * 2 + 2 and len(ax_acc.get_lines()) == 2 * 2 + 1 + 2
    faint = [line for line in ax_acc.get_lines() if line.get_alpha() == 0.3]
    assert [list(line.get_ydata()) for line in faint] == [[50.0] * 3, [40.0] * 3, [60.0] * 3, [70.0] * 3]
    assert np.isnan(ax_loss.get_lines()[2].get_ydata()).all()  # a diverged member's None is a gap, not 0
    assert line_data(ax_acc)["test, ensemble of 2"] == ([1, 2, 3], [75.0] * 3)


def test_compared_runs_draw_their_accuracy_and_gap(figures, tmp_path):
    other = [{**r, "test_accuracy": 0.85} for r in ROWS]
    plots.plot_curves_compare({"a": ROWS, "b": other}, tmp_path / "d.png")
    ax_acc, ax_gap = figures[0].axes
    assert line_data(ax_acc) == {"a": ([1, 2, 3], [80.0] * 3), "b": ([1, 2, 3], [85.0] * 3)}
    gaps = line_data(ax_gap)
    assert list(gaps) == ["a", "b"] and gaps["a"][0] == gaps["b"][0] == [1, 2, 3]
    assert gaps["a"][1] == pytest.approx([10.0] * 3) and gaps["b"][1] == pytest.approx([5.0] * 3)
    assert ax_gap.get_ylabel() == "train - test accuracy (points)"


def test_a_sweep_plots_mean_and_std_per_learning_rate_on_a_log_axis(figures, tmp_path):
    from types import SimpleNamespace as S

    settings = [S(lr=3e-3, weight_decay=0.0, mean=0.9, std=0.01), S(lr=1e-3, weight_decay=0.0, mean=0.8, std=0.02)]
    plots.plot_sweep(settings, tmp_path / "s.png", title="t")
    (ax,) = figures[0].axes
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "learning rate"
    (container,) = ax.containers  # one error-bar line: sorted by learning rate
    line, _caps, (bars,) = container
    assert list(line.get_xdata()) == [1e-3, 3e-3] and list(line.get_ydata()) == pytest.approx([80.0, 90.0])
    spans = np.array([seg[:, 1] for seg in bars.get_segments()])  # each bar: mean - std to mean + std
    np.testing.assert_allclose(spans, [[78.0, 82.0], [89.0, 91.0]])


def test_a_series_draws_raw_and_smoothed_values_and_the_threshold(figures, tmp_path):
    values = np.arange(1.0, 201.0)
    plots.plot_series({"norms": values}, tmp_path / "g.png", xlabel="step", ylabel="norm", title="t", hline=0.5,
                      logy=True)
    (ax,) = figures[0].axes
    raw, smooth, threshold = ax.get_lines()
    assert list(raw.get_ydata()) == list(values) and list(raw.get_xdata()) == list(range(1, 201))
    # A running mean over 2 steps (1% of 200): it starts at step 2 with (1 + 2) / 2.
    assert smooth.get_xdata()[0] == 2 and smooth.get_ydata()[0] == 1.5 and len(smooth.get_ydata()) == 199
    assert list(threshold.get_ydata()) == [0.5, 0.5] and ax.get_yscale() == "log"
    assert smooth.get_label() == "norms (running mean)"


def test_a_saved_plot_is_a_whole_png_of_the_figure(tmp_path):
    from PIL import Image

    path = plots.plot_bars(["a", "bb"], [1.0, 2.0], tmp_path / "b.png", ylabel="x", title="t")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 200
        assert len(np.unique(np.asarray(image.convert("L")))) > 2  # drawn, not a blank canvas
    assert [p.name for p in tmp_path.iterdir()] == ["b.png"]  # no temporary file left beside it
