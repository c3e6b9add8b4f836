"""Full-MNIST, 10-epoch checks: the lesson's promise of about 97% test accuracy (marked slow; CI runs them)."""

from __future__ import annotations

import json

import pytest

from jaxintro.cli import main

pytestmark = pytest.mark.slow


def test_lesson_mlp_reaches_97_percent_in_10_epochs(mnist_dir, tmp_path, capsys):
    code = main(["train", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--seed", "0", "--json",
                 "--run-dir", str(tmp_path / "run"), "--no-compile-cache"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["epochs"] == 10 and summary["param_count"] == 235_146
    assert summary["test_accuracy"] >= 0.970, summary
    assert summary["train_accuracy"] > summary["test_accuracy"]


@pytest.mark.parametrize("style", ["linen", "nnx", "equinox"])
def test_every_model_style_reaches_97_percent(mnist_dir, tmp_path, capsys, style):
    code = main(["train", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--model", style, "--json",
                 "--run-dir", str(tmp_path / "run"), "--no-compile-cache"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["param_count"] == 235_146
    assert summary["test_accuracy"] >= 0.970, summary


def test_lessons_python_loop_matches_the_compiled_epoch(mnist_dir, tmp_path, capsys):
    results = {}
    for loop in ("scan", "python"):
        assert main(["train", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--loop", loop, "--json",
                     "--run-dir", str(tmp_path / loop), "--no-compile-cache"]) == 0
        results[loop] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    first = {loop: json.loads((tmp_path / loop / "metrics.jsonl").read_text().splitlines()[0])["loss"]
             for loop in results}
    # The same function, compiled two ways: equal up to float32 reassociation, not to a rounding boundary.
    assert first["scan"] == pytest.approx(first["python"], rel=1e-5)
    assert abs(results["scan"]["test_accuracy"] - results["python"]["test_accuracy"]) <= 0.003
