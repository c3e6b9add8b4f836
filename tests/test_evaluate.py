"""`evaluate` and `predict` on a real MNIST run: per-class numbers add up; images of any kind are read like MNIST."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from jaxintro.cli import main
from jaxintro.data import load_dataset
from jaxintro.evaluate import fit_like_mnist, load_image


@pytest.fixture(scope="module")
def mnist_run(mnist_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "mnist"
    assert main(["train", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--epochs", "1", "--run-dir", str(run),
                 "--no-compile-cache"]) == 0
    return run


def test_evaluate_reports_per_class_and_a_confusion_matrix(mnist_run, mnist_dir, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(mnist_run), "--data-dir", str(mnist_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    confusion = np.array(report["confusion"])
    assert confusion.shape == (10, 10) and confusion.sum() == 10000
    assert report["test_accuracy"] == pytest.approx(np.trace(confusion) / 10000)
    metrics = [json.loads(line) for line in (mnist_run / "metrics.jsonl").read_text().splitlines()]
    assert report["test_accuracy"] == pytest.approx(metrics[-1]["test_accuracy"])
    per_class = report["per_class_accuracy"]
    assert per_class["1"] == pytest.approx(confusion[1, 1] / confusion[1].sum())
    assert (mnist_run / "confusion.png").read_bytes()[:4] == b"\x89PNG"


def save_as_photo(digit_28: np.ndarray, path, *, invert: bool, scale: int = 6, mode: str = "L") -> None:
    """A scan-like picture of an MNIST digit: larger, off-centre, dark ink on light paper when `invert`."""
    canvas = np.zeros((28 * scale + 40, 28 * scale + 70), np.uint8)
    big = np.asarray(Image.fromarray(digit_28).resize((28 * scale, 28 * scale), Image.Resampling.BILINEAR))
    canvas[10:10 + 28 * scale, 50:50 + 28 * scale] = big
    if invert:
        canvas = 255 - canvas
    Image.fromarray(canvas).convert(mode).save(path)


def test_predict_reads_photos_like_mnist(mnist_run, mnist_dir, tmp_path, capsys):
    ds = load_dataset("mnist", mnist_dir)
    files, labels = [], []
    for i, (fmt, invert, mode) in enumerate([("png", True, "L"), ("jpg", True, "RGB"), ("png", False, "RGB"),
                                              ("png", True, "RGBA"), ("jpg", False, "L"), ("png", True, "L")]):
        path = tmp_path / f"digit{i}.{fmt}"
        save_as_photo(ds.x_test[i].reshape(28, 28), path, invert=invert, mode=mode)
        files.append(str(path))
        labels.append(str(ds.y_test[i]))
    capsys.readouterr()
    assert main(["predict", str(mnist_run), *files, "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["file"] for r in results] == files
    for r in results:
        assert set(r["probabilities"]) == set("0123456789")
        assert sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert sum(r["digit"] == label for r, label in zip(results, labels)) >= 5, (results, labels)


def test_preprocessing_matches_mnist_for_an_mnist_digit(mnist_dir, tmp_path):
    ds = load_dataset("mnist", mnist_dir)
    digit = ds.x_test[0].reshape(28, 28)
    save_as_photo(digit, tmp_path / "d.png", invert=True)
    restored = load_image(tmp_path / "d.png", (28, 28)).reshape(28, 28).astype(float)
    original = digit.astype(float)
    # The same digit comes back: 20 pixels on its longer side, and the same shape up to a shift of a pixel or two.
    rows, cols = np.nonzero(restored > 30)
    assert max(np.ptp(rows), np.ptp(cols)) + 1 in (19, 20, 21)
    best = max(np.corrcoef(np.roll(restored, (dy, dx), axis=(0, 1)).ravel(), original.ravel())[0, 1]
               for dy in range(-2, 3) for dx in range(-2, 3))
    assert best > 0.8, best
    ys, xs = np.indices(restored.shape)
    assert abs((ys * restored).sum() / restored.sum() - 13.5) < 1.0
    assert abs((xs * restored).sum() / restored.sum() - 13.5) < 1.0


def test_blank_image_gives_an_empty_frame():
    assert fit_like_mnist(np.zeros((50, 40)), (28, 28)).sum() == 0


def test_a_file_that_is_not_an_image_is_a_clear_error(mnist_run, tmp_path, capsys):
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    assert main(["predict", str(mnist_run), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a readable image" in err and str(bad) in err and len(err.strip().splitlines()) == 1
