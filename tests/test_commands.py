"""Small command paths: `jaxintro data`, the sweep's verdict, Ctrl-C and a closed pipe, the distributed timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxintro.cli import main
from jaxintro.report import compare_with_lesson
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError

LESSON_LR = TrainConfig().lr


def test_data_prints_each_dataset_where_it_loads_from_and_its_status(capsys, mnist_dir):
    assert main(["data", "--data-dir", str(mnist_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Two lines a dataset, names padded to one column: the name and source, then the status under the source.
    assert [line.split()[0] for line in lines[::2]] == ["digits", "mnist", "fashion-mnist"]
    column = len("fashion-mnist") + 2
    assert lines[2] == "mnist".ljust(column) + str(mnist_dir)
    assert lines[3] == " " * column + "ok (SHA-256 verified)"
    assert main(["data", "--data-dir", str(mnist_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["dataset"] for r in rows] == ["digits", "mnist", "fashion-mnist"]
    assert rows[1] == {"dataset": "mnist", "source": str(mnist_dir), "status": "ok (SHA-256 verified)"}


def setting(lr: float, accuracy: float | None, std: float = 0.0, weight_decay: float = 0.0) -> dict:
    return {"lr": lr, "weight_decay": weight_decay, "test_accuracy": accuracy, "test_accuracy_std": std}


def test_the_sweep_verdict_weighs_the_gap_against_the_seeds_spread():
    lesson = setting(LESSON_LR, 0.95, std=0.003)
    # The gap (1.00 point) is more than the spread (hypot(0.3, 0.4) = 0.50 points): a real win.
    best = setting(3e-3, 0.96, std=0.004)
    assert compare_with_lesson([lesson, best], best) == (
        f"lr 0.003 beats the lesson's {LESSON_LR:g} by 1.00 points, more than the seeds' spread (0.50).")
    # 0.40 points within a 0.50 spread: no claim.
    close = setting(3e-3, 0.954, std=0.004)
    assert compare_with_lesson([lesson, close], close) == (
        f"No setting beats the lesson's lr {LESSON_LR:g} by more than the seeds' spread: the best is 0.40 points "
        "higher, within 0.50.")
    assert compare_with_lesson([lesson, close], lesson) == f"The lesson's lr {LESSON_LR:g} is the best of this grid."


def test_no_verdict_without_a_usable_lesson_setting():
    best = setting(3e-3, 0.96)
    assert compare_with_lesson([best], best) is None  # the lesson's lr was not swept
    assert compare_with_lesson([setting(LESSON_LR, None), best], best) is None  # it diverged
    assert compare_with_lesson([setting(LESSON_LR, float("nan")), best], best) is None
    # Only the lesson's lr at the best setting's weight decay is comparable.
    assert compare_with_lesson([setting(LESSON_LR, 0.5, weight_decay=1e-4), best], best) is None


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(capsys, monkeypatch):
    from jaxintro.commands import data

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "run", interrupted)
    assert main(["data"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "jaxintro data: interrupted\n" and captured.out == ""


def test_a_reader_that_leaves_early_is_not_an_error():
    # `jaxintro data | head -0`: the pipe's reader is gone before the first line is written.
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", "data"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "ten", "", " 7"])
def test_the_distributed_timeout_refuses_what_is_not_a_whole_number_of_seconds(monkeypatch, value):
    from jaxintro.parallel import distributed_timeout

    monkeypatch.setenv("JAXINTRO_DISTRIBUTED_TIMEOUT", value)
    with pytest.raises(ConfigError, match=f"JAXINTRO_DISTRIBUTED_TIMEOUT must be a whole number of seconds >= 1; "
                                          f"got {repr(value)}"):
        distributed_timeout()


def test_the_distributed_timeout_reads_the_environment(monkeypatch):
    from jaxintro.parallel import DISTRIBUTED_TIMEOUT_S, distributed_timeout

    monkeypatch.delenv("JAXINTRO_DISTRIBUTED_TIMEOUT", raising=False)
    assert distributed_timeout() == DISTRIBUTED_TIMEOUT_S == 60
    monkeypatch.setenv("JAXINTRO_DISTRIBUTED_TIMEOUT", "1")
    assert distributed_timeout() == 1
