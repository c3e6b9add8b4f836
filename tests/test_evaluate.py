"""`evaluate` and `predict` on real runs: per-class numbers add up; images of any kind are read like MNIST."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxintro.cli import main
from jaxintro.data import load_dataset
from jaxintro.evaluate import load_run, predict_proba
from jaxintro.images import load_image
from test_images import SEVEN, bomb_png, drawing


@pytest.mark.usefixtures("users_compile")  # compared with the accuracy mnist_run's training (a user's) computed
def test_evaluate_reports_per_class_and_a_confusion_matrix(mnist_run, mnist_dir, tmp_path, capsys):
    # A copy: the session's run is read by the other worker's tests too, and evaluate writes into the run it scores.
    mnist_run = Path(shutil.copytree(mnist_run, tmp_path / "mnist"))
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
        labels.append(int(ds.y_test[i]))
    capsys.readouterr()
    assert main(["predict", str(mnist_run), *files, "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["file"] for r in results] == files
    for r in results:
        assert type(r["digit"]) is int and r["class"] == str(r["digit"])
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


def test_predict_reads_a_transparent_canvas_export(mnist_run, tmp_path, capsys):
    # Dark ink on alpha 0, as a browser's canvas exports it: before the fix, a blank image and a confident guess.
    files = {}
    for digit, strokes in ((1, (((140, 50), (140, 230)),)), (7, SEVEN)):
        files[digit] = tmp_path / f"drawn{digit}.png"
        drawing(strokes=strokes, background=(0, 0, 0, 0)).save(files[digit])
    capsys.readouterr()
    assert main(["predict", str(mnist_run), *map(str, files.values()), "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["digit"] for r in results] == list(files)


@pytest.mark.parametrize("kind", ["blank", "not-an-image", "huge"])
def test_bad_images_are_one_line_errors(kind, digits_run, tmp_path, capsys):
    path = tmp_path / f"{kind}.png"
    if kind == "blank":
        drawing(background=(0, 0, 0, 0), ink=(0, 0, 0, 0)).save(path)
    elif kind == "huge":
        path.write_bytes(bomb_png(14000, 14000))
    else:
        path.write_text("not an image")
    capsys.readouterr()
    assert main(["predict", str(digits_run), str(path)]) == 2
    captured = capsys.readouterr()
    expected = {"blank": "no ink found", "not-an-image": "not a readable image", "huge": "larger than the limit"}
    assert expected[kind] in captured.err and str(path) in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert captured.out == ""


def test_predict_proba_compiles_once_per_loaded_run(digits_run):
    run = load_run(digits_run)
    traces, apply = [], run.model.apply
    run = run._replace(model=run.model._replace(apply=lambda p, x, k: (traces.append(x.shape), apply(p, x, k))[1]))
    x = load_dataset("digits").x_test
    first, second = predict_proba(run, x[:50]), predict_proba(run, x[50:100])
    assert len(traces) == 1, "the second call of the same shape must reuse the compiled function"
    assert first.shape == second.shape == (50, 10) and np.allclose(first.sum(1), 1.0, atol=1e-5)


def test_predict_shows_file_names_escaped(digits_run, tmp_path, capsys):
    named = tmp_path / "seven\x1b]0;pwned\x07\n.png"  # an escape that would retitle the terminal, and a newline
    drawing(strokes=SEVEN).save(named, format="PNG")
    bad = tmp_path / "blank\x1b[2J.png"
    drawing(background=(0, 0, 0, 0), ink=(0, 0, 0, 0)).save(bad, format="PNG")
    capsys.readouterr()
    assert main(["predict", str(digits_run), str(named)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "seven\\x1b]0;pwned\\x07\\n.png: " in out
    assert len(out.strip().splitlines()) == 1
    assert main(["predict", str(digits_run), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "blank\\x1b[2J.png: no ink found" in err


def test_predict_classifies_every_readable_image_and_names_each_other_one(digits_run, tmp_path, capsys):
    good, blank, other = tmp_path / "a.png", tmp_path / "blank.png", tmp_path / "b.png"
    drawing(strokes=SEVEN).save(good, format="PNG")
    drawing(strokes=SEVEN).save(other, format="PNG")
    drawing(background=(0, 0, 0, 0), ink=(0, 0, 0, 0)).save(blank, format="PNG")
    capsys.readouterr()
    assert main(["predict", str(digits_run), str(good), str(blank), str(other), "--json"]) == 2  # one was not
    out, err = capsys.readouterr()
    assert [line.split(":")[0] for line in out.splitlines()[:2]] == [str(good), str(other)]
    assert "blank.png: no ink found" in err and len(err.strip().splitlines()) == 1
    rows = [json.loads(line) for line in out.splitlines()[2:]]
    assert [r["file"] for r in rows] == [str(good), str(blank), str(other)]
    assert "error" in rows[1] and "top3" in rows[0] and "top3" in rows[2]


@pytest.mark.parametrize("lang, shape", [("es", r": \d  \(\d: \d,\d{3}; \d: \d,\d{3}; \d: \d,\d{3}\)$"),
                                         ("en", r": \d  \(\d: \d\.\d{3}, \d: \d\.\d{3}, \d: \d\.\d{3}\)$")])
def test_predict_writes_its_confidences_as_the_language_does(lang, shape, digits_run, tmp_path, capsys):
    """In Spanish a comma is the decimal mark, so the three classes are parted by "; " (0,550; 0,091)."""
    image = tmp_path / "a.png"
    drawing(strokes=SEVEN).save(image, format="PNG")
    capsys.readouterr()
    assert main(["--lang", lang, "predict", str(digits_run), str(image)]) == 0
    assert re.search(shape, capsys.readouterr().out.strip()), shape
