"""Run folders written by jaxintro 0.1.0 as it stood before the engine's redesign still evaluate, predict, serve
and resume.

`tests/data/runs-0.1.0/` holds two such folders, written by that code on the digits with `--hidden 16`
(`single`: `train --epochs 2`; `sweep`: `sweep --epochs 2 --lr 1e-3,1e3 --seeds 2`), and what that code wrote when
it resumed a copy of each to epoch 3 (`resumed-to-epoch-3.json`). Each test copies one into its tmp folder, so the
kept data is never written to.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from jaxintro.cli import main

KEPT = REPO / "tests" / "data" / "runs-0.1.0"


@pytest.fixture(params=["single", "sweep"])
def old_run(request, tmp_path) -> Path:
    run = tmp_path / request.param
    shutil.copytree(KEPT / request.param, run)
    return run


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_an_old_run_folder_evaluates_predicts_serves_and_resumes(old_run, tmp_path, capsys):
    from jaxintro import serve

    result = json.loads((old_run / "result.json").read_text())
    assert main(["evaluate", str(old_run), "--json"]) == 0
    evaluated = last_json(capsys)
    if "best" in result:  # the sweep: used through its best setting, whose seeds' mean it printed
        accuracies = [m["test_accuracy"] for m in result["members"] if m["lr"] == result["best"]["lr"]]
        assert np.mean(accuracies) == pytest.approx(result["best"]["test_accuracy"])
        assert len(evaluated["member_test_accuracy"]) == 4
    else:
        assert evaluated["test_accuracy"] == pytest.approx(result["test_accuracy"])
    image = tmp_path / "one.png"
    pixels = np.zeros((8, 8), np.uint8)
    pixels[1:7, 3:5] = 255
    Image.fromarray(pixels).save(image)
    assert main(["predict", str(old_run), str(image), "--json"]) == 0
    assert sum(last_json(capsys)["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    app = serve.load_app(old_run)
    assert app.run_info()["checkpoint_epoch"] == 2 and len(app.mistakes.index) > 0
    assert main(["train", "--resume", str(old_run), "--epochs", "3", "--json"]) == 0
    resumed = last_json(capsys)
    assert resumed["epochs"] == 3 and resumed["finished"]
    # The resumed epoch is the one the old code trained from the same checkpoint (its parameters, Adam's moments
    # and key all restored): each member's numbers as 0.1.0 wrote them (measured equal to the last bit).
    row = json.loads((old_run / "metrics.jsonl").read_text().splitlines()[-1])
    expected = json.loads((KEPT / "resumed-to-epoch-3.json").read_text())[old_run.name]
    got = row if old_run.name == "single" else row["members"]
    for field, value in expected.items():
        assert got[field] == pytest.approx(value, rel=1e-6), field
    # Every step kept its gradient's norm before the switch existed: the resumed epoch's row keeps it too.
    assert np.all(np.asarray(got["max_grad_norm"]) > 0)
