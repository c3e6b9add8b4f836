"""The experiment commands run the shared trainer and report what they measured."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jaxintro.cli import main

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--dataset", "digits", "--epochs", "3"]


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def run_in_default_folder(capsys, monkeypatch, folder: Path, name: str, *flags: str) -> tuple[dict, Path]:
    """`experiment NAME` run in `folder` without --out: its report and the default folder it wrote into.

    The exercises' pages show the `Plot:` line this prints: the line they show must be the one printed here.
    """
    monkeypatch.chdir(folder)
    assert main(["experiment", name, *SMALL, *flags, "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for doc in ("docs/exercises.md", "docs/exercises.es.md"):
        shown = [line for line in (REPO / doc).read_text().splitlines()
                 if line.startswith(f"Plot: runs/experiment-{name}/")]
        assert shown and set(shown) <= set(lines), (doc, shown, lines)
    return json.loads(lines[-1]), folder / "runs" / f"experiment-{name}"


def refit(**flags):
    """The experiment's run with `flags`, trained again here on the same digits (training is deterministic)."""
    from jaxintro.config import TrainConfig
    from jaxintro.data import load_dataset
    from jaxintro.train import fit

    digits = load_dataset("digits")
    return fit(TrainConfig(dataset="digits", epochs=3, **flags), digits, log=lambda _: None), digits


def train_accuracy_dropout_off(result, digits, rate: float) -> float:
    """The final parameters' accuracy on the whole training set, computed here with dropout off (no key)."""
    from jaxintro.models import build_model
    from jaxintro.lesson import scale_images

    model = build_model("jax", digits.num_features, (256, 128), digits.num_classes, dropout=rate)
    logits = model.apply(result.state.params, scale_images(digits.x_train), None)
    return float(np.mean(np.asarray(logits).argmax(1) == digits.y_train))


def test_dropout_experiment(capsys, monkeypatch, tmp_path):
    report, out = run_in_default_folder(capsys, monkeypatch, tmp_path, "dropout", "--rate", "0.3")
    assert report["rate"] == 0.3
    assert 0.5 < report["accuracy_without"] <= 1 and 0.5 < report["accuracy_with"] <= 1
    assert report["accuracy_with"] != report["accuracy_without"]
    # The gaps, the experiment's result: the training set's accuracy (dropout off) minus the test set's.
    for rate, key in ((0.0, "without"), (0.3, "with")):
        result, digits = refit(dropout=rate)
        assert report[f"accuracy_{key}"] == result.history[-1].test_accuracy
        gap = train_accuracy_dropout_off(result, digits, rate) - result.history[-1].test_accuracy
        assert report[f"gap_{key}"] == pytest.approx(gap, abs=1e-9), key
    assert (out / "dropout.png").exists() and json.loads((out / "dropout.json").read_text()) == report


def test_models_experiment_covers_every_style(capsys, tmp_path):
    report = run_json(capsys, ["experiment", "models", *SMALL, "--out", str(tmp_path), "--json"])
    rows = {r["model"]: r for r in report["rows"]}
    assert set(rows) == {"jax", "linen", "nnx", "equinox"}
    assert {r["param_count"] for r in rows.values()} == {64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10}
    assert all(r["test_accuracy"] > 0.6 for r in rows.values())


def test_clipping_experiment_records_every_step(capsys, monkeypatch, tmp_path):
    report, out = run_in_default_folder(capsys, monkeypatch, tmp_path, "clipping", "--clip", "0.5")
    # The fraction of all the clipped run's steps (3 epochs) whose norm before clipping exceeded 0.5.
    clipped, _digits = refit(clip_norm=0.5, record_grad_norm=True)
    norms = np.concatenate([m["grad_norm"] for m in clipped.step_metrics])
    assert len(norms) == 3 * len(clipped.step_metrics[0]["grad_norm"]) > 3
    assert report["clipped_fraction"] == pytest.approx(np.mean(norms > 0.5), abs=1e-12)
    assert report["accuracy_clipped"] == clipped.history[-1].test_accuracy
    # Early gradients of a fresh network are large: some steps must have been clipped at 0.5.
    assert report["clipped_fraction_first_epoch"] > 0
    assert report["max_norm_unclipped"] > 0.5
    assert {"accuracy_clipped", "accuracy_unclipped"} <= set(report)
    assert (out / "grad_norms.png").exists()


def test_clipping_changes_the_update_but_not_the_norm_record(tiny):
    """The recorded norm is the gradient's before clipping; with a huge threshold nothing changes."""
    import dataclasses

    from jaxintro.config import TrainConfig
    from jaxintro.train import fit

    base = TrainConfig(epochs=1, batch_size=64, record_grad_norm=True)
    plain = fit(base, tiny, log=lambda _: None)
    loose = fit(dataclasses.replace(base, clip_norm=1e9), tiny, log=lambda _: None)
    tight = fit(dataclasses.replace(base, clip_norm=0.01), tiny, log=lambda _: None)
    np.testing.assert_allclose(plain.step_metrics[0]["grad_norm"], loose.step_metrics[0]["grad_norm"], rtol=1e-6)
    assert plain.step_metrics[0]["grad_norm"][0] == tight.step_metrics[0]["grad_norm"][0]
    # Step 1 used a clipped update, so step 2 sees other parameters and another gradient.
    assert tight.step_metrics[0]["grad_norm"][1] != plain.step_metrics[0]["grad_norm"][1]
