"""Checkpoints: resume is bit-identical for every style; Ctrl-C and crashes leave a usable run; bad ones fail."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator

import jax
import numpy as np
import pytest

import jaxintro
from jaxintro import checkpoint
from jaxintro.cli import main
from jaxintro.errors import CheckpointError
from jaxintro.evaluate import load_run

DIGITS = ["--dataset", "digits", "--save-every", "0"]  # every epoch saved: these tests count checkpoints


def train(capsys, *argv) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.backend
@pytest.mark.parametrize("style, extra", [("jax", []), ("jax", ["--dropout", "0.2"]), ("linen", []),
                                          ("nnx", []), ("equinox", []), ("jax", ["--loop", "python"])])
def test_resume_is_bit_identical(capsys, tmp_path, style, extra):
    flags = [*DIGITS, "--model", style, *extra]
    whole = train(capsys, *flags, "--epochs", "3", "--run-dir", str(tmp_path / "whole"))
    train(capsys, *flags, "--epochs", "1", "--run-dir", str(tmp_path / "parts"))
    resumed = train(capsys, "--resume", str(tmp_path / "parts"), "--epochs", "3")
    for key in ("epochs", "test_accuracy", "train_accuracy", "final_loss", "param_count"):
        assert resumed[key] == whole[key], key
    a, b = load_run(tmp_path / "whole"), load_run(tmp_path / "parts")
    assert a.epoch == b.epoch == 3
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_array_equal(x, y)
    metrics = [json.loads(line) for line in (tmp_path / "parts" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2, 3]


def test_plain_orbax_reads_a_checkpoint_without_jaxintro(capsys, tmp_path):
    train(capsys, *DIGITS, "--epochs", "2", "--run-dir", str(tmp_path / "r"))
    code = (
        "import sys, orbax.checkpoint as ocp\n"
        f"tree = ocp.StandardCheckpointer().restore({str(tmp_path / 'r' / 'checkpoints' / '2' / 'state')!r})\n"
        "assert not any(m.startswith('jaxintro') for m in sys.modules)\n"
        "print(sorted(tree['params']), tree['params']['layer1']['w'].shape)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "['layer1', 'layer2', 'layer3'] (64, 256)" in out


def start_training(tmp_path: Path, epochs: int = 100000, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "jaxintro.cli", "train", *DIGITS, *extra, "--epochs", str(epochs), "--run-dir",
         str(tmp_path / "r"), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_epoch(proc: subprocess.Popen, epoch: int) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Epoch") and int(line.split("|")[0].split()[1]) >= epoch:
            return lines
    raise AssertionError("training ended before epoch %d: %s %s" % (epoch, lines, proc.stderr.read()))


def test_ctrl_c_stops_after_a_checkpoint_and_resumes(capsys, tmp_path):
    proc = start_training(tmp_path)
    wait_for_epoch(proc, 2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopping after this epoch" in err and "jaxintro train --resume" in out
    summary = json.loads(out.strip().splitlines()[-1])
    stopped = summary["epochs"]
    assert checkpoint.read_meta(tmp_path / "r")["epoch"] == stopped
    resumed = train(capsys, "--resume", str(tmp_path / "r"), "--epochs", str(stopped + 1))
    assert resumed["epochs"] == stopped + 1


def test_a_killed_run_always_leaves_a_restorable_checkpoint(tmp_path):
    """SIGKILL lands at a random point, often mid-save: the previous checkpoints must survive."""
    proc = start_training(tmp_path)
    wait_for_epoch(proc, 3)
    time.sleep(0.05)
    proc.kill()
    proc.communicate(timeout=60)
    run = load_run(tmp_path / "r")
    # Saves run in the background, and one waits for the one before: epoch 1's is on disk by epoch 3.
    assert run.epoch >= 1
    metrics = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= metrics[-1]["epoch"] <= run.epoch  # metrics.jsonl is never ahead of the checkpoints


def test_metrics_are_reported_saved_only_once_their_step_is_on_disk(tiny, tmp_path):
    from jaxintro.config import TrainConfig
    from jaxintro.train import Trainer

    config = TrainConfig(dataset="digits", epochs=3)
    state = Trainer.create(config, tiny).init_state()
    seen = []
    saver = checkpoint.Checkpointer(tmp_path, on_saved=lambda rows: seen.append(
        (len(rows), sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()))))
    rows = []
    for epoch in (1, 2, 3):
        rows.append({"epoch": epoch})
        saver.save(state._replace(epoch=epoch), config, rows)
    saver.close()
    # Each call: the rows of one step, made after that step's folder got its final name.
    assert seen == [(1, [1]), (2, [1, 2]), (3, [1, 2, 3])]
    assert checkpoint.read_meta(tmp_path)["metrics"] == rows


def test_a_half_written_checkpoint_is_ignored(capsys, tmp_path):
    train(capsys, *DIGITS, "--epochs", "2", "--run-dir", str(tmp_path / "r"))
    ckpts = tmp_path / "r" / "checkpoints"
    partial = ckpts / "3.orbax-checkpoint-tmp-1234567"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "garbage").write_bytes(b"\x00" * 100)
    assert load_run(tmp_path / "r").epoch == 2


def test_damaged_and_foreign_checkpoints_are_clear_errors(capsys, tmp_path):
    train(capsys, *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "r"))
    with pytest.raises(CheckpointError, match="no checkpoints/ folder"):
        load_run(tmp_path)
    # another architecture: the config says 256,128 but the arrays are 32-wide
    train(capsys, *DIGITS, "--epochs", "1", "--hidden", "32", "--run-dir", str(tmp_path / "small"))
    meta_file = tmp_path / "small" / "checkpoints" / "1" / "meta" / "metadata"  # Orbax's JsonSave file
    meta = json.loads(meta_file.read_text())
    meta["config"]["hidden"] = [256, 128]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="another architecture"):
        load_run(tmp_path / "small")
    # a config from another jaxintro version
    meta["config"]["hidden"] = [32]
    meta["jaxintro_version"] = "0.0.1"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="written by jaxintro 0.0.1"):
        load_run(tmp_path / "small")
    # a crafted dataset record: one line, before any array of its size exists
    meta["jaxintro_version"] = jaxintro.__version__
    meta["dataset"]["image_shape"] = [30000, 30000]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="dataset record is damaged .*not a small square image"):
        load_run(tmp_path / "small")


def test_truncated_checkpoint_files_are_a_clear_error(capsys, tmp_path):
    train(capsys, *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "r"))
    state = tmp_path / "r" / "checkpoints" / "1" / "state"
    for path in state.rglob("*"):
        if path.is_file() and path.stat().st_size > 1000:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with pytest.raises(CheckpointError):
        load_run(tmp_path / "r")
    assert main(["evaluate", str(tmp_path / "r")]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_resume_of_a_missing_run_is_a_one_line_error(capsys, tmp_path):
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing does not exist" in err


def test_resume_refuses_the_flags_it_cannot_honour(capsys, tmp_path):
    train(capsys, *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "r"))
    code = main(["train", "--resume", str(tmp_path / "r"), "--dataset", "fashion-mnist", "--lr", "0.5",
                 "--hidden", "32", "--model", "nnx", "--epochs", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "cannot honour --dataset, --hidden, --lr, --model" in err
    assert checkpoint.read_meta(tmp_path / "r")["epoch"] == 1  # nothing ran


def test_a_scheduled_run_resumes_to_its_planned_end_but_not_beyond(capsys, tmp_path):
    flags = [*DIGITS, "--schedule", "warmup-cosine", "--warmup-steps", "10", "--epochs", "3"]
    whole = train(capsys, *flags, "--run-dir", str(tmp_path / "whole"))
    train(capsys, *flags, "--run-dir", str(tmp_path / "r"))
    shutil.rmtree(tmp_path / "r" / "checkpoints" / "3")  # as if stopped after epoch 2
    assert main(["train", "--resume", str(tmp_path / "r"), "--epochs", "5"]) == 2
    assert "planned for 3 epochs" in capsys.readouterr().err
    resumed = train(capsys, "--resume", str(tmp_path / "r"))
    assert resumed["test_accuracy"] == whole["test_accuracy"] and resumed["final_loss"] == whole["final_loss"]


def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(capsys, tmp_path):
    whole = train(capsys, *DIGITS, "--epochs", "4", "--run-dir", str(tmp_path / "whole"))
    train(capsys, *DIGITS, "--epochs", "3", "--run-dir", str(tmp_path / "r"))
    damaged = tmp_path / "r" / "checkpoints" / "3"
    for path in (damaged / "state").rglob("*"):
        if path.is_file() and path.stat().st_size > 1000:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", "train", "--resume", str(tmp_path / "r"),
                           "--epochs", "4", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint(s) 3 could not be read" in proc.stderr and "using checkpoint 2" in proc.stderr
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr
    assert "Resuming" in proc.stdout and "from epoch 2 to 4" in proc.stdout
    resumed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resumed["final_loss"] == whole["final_loss"] and resumed["test_accuracy"] == whole["test_accuracy"]
    assert load_run(tmp_path / "r").epoch == 4  # epoch 3 was written anew, intact


def test_an_auto_run_resumes_on_the_data_it_resolved_to_even_once_mnist_is_there(capsys, tmp_path, monkeypatch,
                                                                                   mnist_dir):
    with pytest.warns(UserWarning, match="Falling back"):  # offline, no MNIST: `auto` trains on the digits
        first = train(capsys, "--dataset", "auto", "--epochs", "1", "--run-dir", str(tmp_path / "r"),
                      "--no-compile-cache")
    assert first["dataset"] == "digits"
    monkeypatch.setenv("JAXINTRO_DATA_DIR", str(mnist_dir))  # now `auto` would find MNIST
    resumed = train(capsys, "--resume", str(tmp_path / "r"), "--epochs", "2")
    assert resumed["dataset"] == "digits" and resumed["epochs"] == 2
    straight = train(capsys, *DIGITS, "--epochs", "2", "--run-dir", str(tmp_path / "straight"))
    assert resumed["final_loss"] == straight["final_loss"] and resumed["test_accuracy"] == straight["test_accuracy"]


@pytest.mark.usefixtures("users_compile")  # an epoch of full MNIST: as a user's, where optimizing pays
def test_resume_reads_the_data_from_the_data_dir_it_is_given(capsys, tmp_path, mnist_run, mnist_dir):
    run = tmp_path / "r"
    shutil.copytree(mnist_run, run)
    # A folder without the data: the named folder is the one searched, and the error names it.
    (tmp_path / "empty").mkdir()
    assert main(["train", "--resume", str(run), "--epochs", "2", "--data-dir", str(tmp_path / "empty")]) == 2
    assert f"--data-dir {tmp_path / 'empty'} holds none of mnist's four IDX files" in capsys.readouterr().err
    # Another folder holding MNIST: the run goes on from it, and its config remembers that folder.
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in mnist_dir.glob("*.gz"):
        (moved / f.name).symlink_to(f)
    resumed = train(capsys, "--resume", str(run), "--epochs", "2", "--data-dir", str(moved))
    assert resumed["epochs"] == 2 and resumed["dataset"] == "mnist"
    assert json.loads((run / "config.json").read_text())["data_dir"] == str(moved)


def test_a_resume_that_only_writes_the_last_files_says_so_without_a_nan_rate(capsys, tmp_path):
    # Killed after its last checkpoint but before result.json: the resume trains nothing and writes the rest.
    train(capsys, *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "r"))
    (tmp_path / "r" / "result.json").unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "all trained before this resume" in out
    assert json.loads((tmp_path / "r" / "result.json").read_text())["finished"] is True


def test_a_resumed_run_remembers_which_members_diverged(capsys, tmp_path):
    # SGD at lr 3 diverges three of four seeds by the second epoch; a resume must report what the
    # uninterrupted run reports, not forget them (they were left out of every mean and used by nothing).
    flags = [*DIGITS, "--optimizer", "sgd", "--lr", "3", "--seeds", "4"]

    def last(run: str) -> dict:
        return json.loads((tmp_path / run / "metrics.jsonl").read_text().splitlines()[-1])

    def done_line() -> str:
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("Done:")][0]

    assert main(["train", *flags, "--epochs", "4", "--run-dir", str(tmp_path / "straight")]) == 0
    trained = sum(accuracy is not None for accuracy in last("straight")["members"]["test_accuracy"])
    assert trained == 1, "the case: three members diverge (their losses exploded, their weights finite)"
    # The Done line is over the members that trained and says how many (it once said "of 4 members"), with no
    # spread for one; their ensemble is the one that trained (the exploded members, finite, were once averaged in).
    assert "% (the only one of 4 members that trained; it is also their ensemble)" in done_line()
    result = json.loads((tmp_path / "straight" / "result.json").read_text())
    assert result["ensemble_test_accuracy"] == result["test_accuracy"] == last("straight")["ensemble_test_accuracy"]
    train(capsys, *flags, "--epochs", "2", "--run-dir", str(tmp_path / "resumed"))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main(["train", "--resume", str(tmp_path / "resumed"), "--epochs", "4"]) == 0
    assert not [w for w in said if "diverged:" in str(w.message)]  # none newly diverged in this process
    assert "% (the only one of 4 members that trained; it is also their ensemble)" in done_line()

    straight, resumed = last("straight"), last("resumed")
    assert resumed["members"] == straight["members"]
    assert json.loads((tmp_path / "resumed" / "result.json").read_text())["test_accuracy"] == \
        json.loads((tmp_path / "straight" / "result.json").read_text())["test_accuracy"]


@contextlib.contextmanager
def default_prng(impl: str) -> Iterator[None]:
    """JAX's default PRNG implementation set to `impl` (what `JAX_DEFAULT_PRNG_IMPL` sets), then put back."""
    before = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", impl)
    try:
        yield
    finally:
        jax.config.update("jax_default_prng_impl", before)


def test_a_run_goes_on_with_the_prng_it_started_with(capsys, tmp_path):
    # Trained with rbg; resumed where the default is unsafe_rbg (the same key shape, another stream: once
    # continued silently on it) and evaluated where it is threefry (another key shape: once a flood of errors).
    with default_prng("rbg"):
        whole = train(capsys, *DIGITS, "--epochs", "2", "--run-dir", str(tmp_path / "whole"))
        train(capsys, *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "parts"))
    assert checkpoint.read_meta(tmp_path / "parts")["prng_impl"] == "rbg"
    with default_prng("unsafe_rbg"):
        resumed = train(capsys, "--resume", str(tmp_path / "parts"), "--epochs", "2")
    assert resumed["final_loss"] == whole["final_loss"] and resumed["test_accuracy"] == whole["test_accuracy"]
    assert main(["evaluate", str(tmp_path / "parts"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["test_accuracy"] == whole["test_accuracy"]
    # A checkpoint written before the record: its key's width tells the family (4 words: rbg, not threefry's 2).
    shutil.copytree(tmp_path / "whole", tmp_path / "unrecorded")
    for meta_file in (tmp_path / "unrecorded" / "checkpoints").glob("*/meta/metadata"):
        meta_file.write_text(json.dumps({k: v for k, v in json.loads(meta_file.read_text()).items() if k != "prng_impl"}))
    assert main(["evaluate", str(tmp_path / "unrecorded"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["test_accuracy"] == whole["test_accuracy"]


def test_foreign_and_damaged_checkpoints_end_in_one_line_and_nothing_else_on_stderr(capsys, tmp_path):
    # Each refused in one process, read to its end: what Orbax abandons is collected into errors.log, not
    # printed at exit under the line.
    train(capsys, *DIGITS, "--epochs", "1", "--hidden", "32", "--run-dir", str(tmp_path / "r"))
    runs = {}
    for name, change in (("wider", {"config": {"hidden": [256, 128]}}), ("no-such-prng", {"prng_impl": "no_such"}),
                         ("truncated", None)):
        runs[name] = tmp_path / name
        shutil.copytree(tmp_path / "r", runs[name])
        meta_file = runs[name] / "checkpoints" / "1" / "meta" / "metadata"  # Orbax's JsonSave file
        if change is None:
            for path in (runs[name] / "checkpoints" / "1" / "state").rglob("*"):
                if path.is_file() and path.stat().st_size > 1000:
                    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
        else:
            meta = json.loads(meta_file.read_text())
            meta.update({k: {**meta[k], **v} if isinstance(v, dict) else v for k, v in change.items()})
            meta_file.write_text(json.dumps(meta))
    evaluate_each = "import sys; from jaxintro.cli import main; print([main(['evaluate', d]) for d in sys.argv[1:]])"
    proc = subprocess.run([sys.executable, "-c", evaluate_each, *map(str, runs.values())], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "[2, 2, 2]", proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 3, proc.stderr[-3000:]
    assert "layer1" in lines[0] and "another architecture" in lines[0]
    assert "records the PRNG implementation 'no_such'" in lines[1]
    assert "no checkpoint could be restored" in lines[2]
