"""The command line: bad values are one-line errors (exit 2); a run writes its folder and JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxintro.cli import main

BAD_TRAIN_FLAGS = [
    ["--batch-size", "0"],
    ["--batch-size", "-3"],
    ["--epochs", "0"],
    ["--epochs", "-1"],
    ["--epochs", "1e9"],
    ["--lr", "0"],
    ["--lr", "nan"],
    ["--lr", "-1"],
    ["--lr", "inf"],
    ["--dropout", "1"],
    ["--dropout", "-0.1"],
    ["--dataset", "cifar"],
    ["--model", "resnet"],
    ["--optimizer", "not-an-optimizer"],
    ["--schedule", "step"],
    ["--hidden", "256,x"],
    ["--hidden", "0"],
    ["--hidden", ",".join(["8"] * 65)],  # past 64 layers: a crafted checkpoint's config is refused alike
    ["--seed", "-1"],
    ["--clip-norm", "0"],
    ["--devices", "0"],
    ["--warmup-steps", "-5"],
]


@pytest.mark.parametrize("flags", BAD_TRAIN_FLAGS, ids=lambda f: " ".join(f))
def test_bad_values_are_one_line_errors(flags, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        code = main(["train", "--run-dir", str(tmp_path / "run"), *flags])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists(), "nothing may be written before the config is valid"


def test_batch_larger_than_the_dataset_is_refused(capsys, tmp_path):
    code = main(["train", "--dataset", "digits", "--batch-size", "5000", "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert "larger than the 1437 training images" in capsys.readouterr().err


def test_train_on_digits_writes_the_run_folder_and_json(capsys, tmp_path):
    run = tmp_path / "run"
    code = main(["train", "--dataset", "digits", "--epochs", "2", "--run-dir", str(run), "--json",
                 "--no-compile-cache"])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert re.match(r"Epoch +1 \| Loss: ", out[1]) and "Train Acc: " in out[1] and "Test Acc: " in out[1]
    summary = json.loads(out[-1])
    for key in ["dataset", "model", "epochs", "param_count", "test_accuracy", "train_accuracy", "final_loss",
                "train_seconds", "samples_per_second", "run_dir"]:
        assert key in summary
    assert summary["dataset"] == "digits" and summary["epochs"] == 2 and summary["param_count"] == 50_826
    config = json.loads((run / "config.json").read_text())
    assert config["epochs"] == 2 and config["hidden"] == [256, 128] and config["resolved_dataset"] == "digits"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert metrics[-1]["test_accuracy"] == summary["test_accuracy"]
    assert not any("max_grad_norm" in m for m in metrics)  # not recorded unless asked (--record-grad-norm)
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_record_grad_norm_writes_each_members_largest_norm(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--seeds", "2", "--run-dir", str(run),
                 "--record-grad-norm", "--no-compile-cache"]) == 0
    assert json.loads((run / "config.json").read_text())["record_grad_norm"] is True
    for row in (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()):
        norms = row["members"]["max_grad_norm"]
        assert len(norms) == 2 and norms[0] != norms[1] and min(norms) > 0
        assert row["max_grad_norm"] == pytest.approx(np.mean(norms))


def test_a_used_run_folder_is_refused(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run), "--no-compile-cache"]) == 0
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_offline_default_train_falls_back_to_digits_and_says_so(tmp_path):
    """`make train` on a machine with no MNIST and no network still trains, and warns why."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "JAXINTRO_MIRRORS": "http://127.0.0.1:9/"}
    env.pop("JAXINTRO_DATA_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "jaxintro.cli", "train", "--epochs", "1", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: MNIST is not available" in proc.stderr and "--data-dir" in proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["dataset"] == "digits"
    assert Path(tmp_path / summary["run_dir"], "metrics.jsonl").exists()


def test_hidden_sets_depth_and_widths_and_param_count_follows(capsys, tmp_path):
    code = main(["train", "--dataset", "digits", "--epochs", "1", "--hidden", "32,16,8", "--run-dir",
                 str(tmp_path / "r"), "--json", "--no-compile-cache"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["param_count"] == (64 * 32 + 32) + (32 * 16 + 16) + (16 * 8 + 8) + (8 * 10 + 10)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["hidden"] == [32, 16, 8]


def test_persistent_cache_is_reported_for_the_training_program_itself(capsys, tmp_path, cold_compile_cache,
                                                                       monkeypatch):
    def cache(*extra: str) -> str:
        assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(tmp_path / str(len(seen))),
                     *extra, "--json"]) == 0
        seen.append(extra)
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["compile_cache"]

    seen: list = []
    assert cache() == "miss"  # an empty compile cache
    assert cache() == "hit"
    # Another learning rate is an input of the same training program (`optim.build_optimizer`): a hit. Another
    # optimizer is another training program, while the evaluation programs are the same ones: only the training
    # program counts.
    assert cache("--lr", "0.002") == "hit"
    assert cache("--optimizer", "sgd") == "miss"
    assert cache("--no-compile-cache") == "off"
    # The same folder reached through a symbolic link (a user cache under a linked home) is the same cache.
    linked = tmp_path / "linked-cache"
    linked.mkdir()
    (linked / "jaxintro").symlink_to(cold_compile_cache.parent, target_is_directory=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(linked))
    assert cache() == "hit"


def test_matmul_precision_is_a_runs_own_and_reaches_its_compiled_dots(tmp_path, capsys):
    """`--matmul-precision highest`: saved with the run, set while it trains (and while it is evaluated), and in
    the epoch program every dot asks for it; `default` leaves JAX's own. A resume cannot change it."""
    import jax

    from jaxintro.config import TrainConfig
    from jaxintro.data import load_dataset
    from jaxintro.runtime import set_matmul_precision
    from jaxintro.train import Trainer

    run = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--matmul-precision", "highest",
                 "--run-dir", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["matmul_precision"] == "highest"
    assert jax.config.jax_default_matmul_precision == "highest"
    assert main(["train", "--resume", str(run), "--epochs", "2", "--matmul-precision", "default"]) == 2
    assert "cannot honour --matmul-precision" in capsys.readouterr().err
    digits = load_dataset("digits")
    for precision, dots in (("highest", "HIGHEST"), ("default", None)):
        set_matmul_precision(precision)
        trainer = Trainer.create(TrainConfig(dataset="digits", matmul_precision=precision), digits)
        state, train, _test = trainer.place(trainer.init_state(), digits)
        text = trainer.lower_epoch(state, train).as_text()
        assert (dots in text) if dots else ("HIGHEST" not in text), precision


def test_a_resume_whose_config_json_is_unreadable_keeps_the_runs_precision(tmp_path):
    import jax

    from jaxintro.runtime import set_matmul_precision

    run = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--matmul-precision", "highest",
                 "--run-dir", str(run)]) == 0
    (run / "config.json").write_text("{ damaged")  # the checkpoint's own config still says "highest"
    set_matmul_precision("default")  # as a fresh process starts
    try:
        assert main(["train", "--resume", str(run), "--epochs", "2"]) == 0
        assert jax.config.jax_default_matmul_precision == "highest"
    finally:
        set_matmul_precision("default")


# What JAX raised on a TPU machine while another process held the chip (jaxintro train, 6 December 2026).
CHIP_HELD = ("Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu multi-process lockfile. "
             "Run \"$ sudo rm /tmp/libtpu_lockfile\". (set JAX_PLATFORMS='' to automatically choose an available backend)")


@pytest.mark.parametrize("message, said", [
    (CHIP_HELD, "the TPU is held by another process (ABORTED: Internal error when accessing libtpu"),
    ("Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 1234. Not attempting "
     "to load libtpu.so in this process.", "the TPU is held by another process (ABORTED: The TPU is already in use"),
    ("Unable to initialize backend 'tpu': INTERNAL: Failed to get global TPU topology",  # no full stop
     "JAX could not open the TPU (INTERNAL: Failed to get global TPU topology)"),
    ("Unable to initialize backend 'cuda': INTERNAL: no CUDA devices. ", "JAX could not open the CUDA (INTERNAL: no "
                                                                         "CUDA devices)")])
def test_a_device_that_cannot_be_opened_is_one_line(message, said, monkeypatch, capsys, tmp_path, digits_run):
    def refuse(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr("jax.devices", refuse)
    monkeypatch.setattr("jax.default_backend", refuse)
    for argv in (["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(tmp_path / "run")],
                 ["evaluate", str(digits_run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "JAX_PLATFORMS=cpu" in err and "sudo" not in err, err
    assert not (tmp_path / "run").exists()


def test_any_other_runtime_error_is_not_mistaken_for_a_device(monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise RuntimeError("Unable to initialize the plot")

    monkeypatch.setattr("jax.devices", fail)
    monkeypatch.setattr("jax.default_backend", fail)
    with pytest.raises(RuntimeError, match="the plot"):
        main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(tmp_path / "run")])
