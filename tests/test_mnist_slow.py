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
