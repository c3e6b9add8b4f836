"""Many models used by every tool: a sweep through its best setting, a diverged member never scored or averaged.

And the multi-process paths that met many models or the lesson's loop: a resume that discards a damaged
checkpoint, `--loop python` refused before joining, a peer that never joins ending in one line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from conftest import synthetic_dataset
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.members import average_probabilities, ensemble_model
from jaxintro.evaluate import load_run
from jaxintro.models import build_model
from jaxintro.train import Trainer

SWEEP = ["--dataset", "digits", "--epochs", "2", "--seeds", "1", "--json"]


def run_json(capsys, *argv: str) -> tuple[dict, str]:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


@pytest.fixture(scope="module")
def bad_lr_sweep(tmp_path_factory) -> Path:
    """A sweep whose second setting (adam at lr 1) trains, finite (no loss past 1e6), into a model at chance level."""
    run = tmp_path_factory.mktemp("sweep") / "r"
    assert main(["sweep", "--lr", "1e-3,1", "--run-dir", str(run), *SWEEP]) == 0
    return run


@pytest.fixture(scope="module")
def diverged_sweep(tmp_path_factory) -> Path:
    """A sweep of two seeds per setting whose second setting (sgd at 1e12) diverges: NaN parameters."""
    run = tmp_path_factory.mktemp("diverged") / "r"
    with pytest.warns(RuntimeWarning, match="diverged"):
        assert main(["sweep", "--optimizer", "sgd", "--lr", "0.1,1e12", "--run-dir", str(run), *SWEEP[:4], "--seeds",
                     "2"]) == 0
    return run


def digit_png(path: Path) -> Path:
    pixels = np.zeros((8, 8), np.uint8)
    pixels[1:7, 3:5] = 255  # a "1"
    Image.fromarray(pixels).save(path)
    return path


def test_a_sweep_predicts_evaluates_and_serves_through_its_best_setting(bad_lr_sweep, tmp_path, capsys):
    from jaxintro import serve

    result = json.loads((bad_lr_sweep / "result.json").read_text())
    best, worst = result["members"]
    assert result["best"]["lr"] == 1e-3 and best["test_accuracy"] > worst["test_accuracy"]
    # Every headline field is about the setting the run is used through, not an average over the grid.
    assert (result["test_accuracy"], result["train_accuracy"], result["final_loss"]) == (
        best["test_accuracy"], best["train_accuracy"], best["final_loss"])
    # The figure `sweep` reports for its run is the best setting's model, not every member averaged.
    assert result["ensemble_test_accuracy"] == pytest.approx(best["test_accuracy"])
    loaded = load_run(bad_lr_sweep)
    assert loaded.choice.used == [0] and loaded.describe_use() == "the setting lr=0.001, one model"
    evaluated, out = run_json(capsys, "evaluate", str(bad_lr_sweep), "--json")
    assert evaluated["test_accuracy"] == pytest.approx(best["test_accuracy"])
    assert "Setting used: lr=0.001 (the best" in out
    # predict answers with the lr 1e-3 model alone: exactly its probabilities, whatever lr 1 says.
    image = digit_png(tmp_path / "one.png")
    assert main(["predict", str(bad_lr_sweep), str(image), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    member = jax.tree.map(lambda leaf: leaf[0], loaded.all_params)
    from jaxintro.images import load_image

    x = load_image(image, (8, 8))
    own = np.asarray(jax.nn.softmax(loaded.member_model.apply(member, jnp.asarray(x[None] / 255.0), None)))[0]
    np.testing.assert_allclose([answer["probabilities"][str(c)] for c in range(10)], own, rtol=1e-5, atol=1e-7)
    app = serve.load_app(bad_lr_sweep)
    assert app.run_info()["model"].endswith("the setting lr=0.001, one model")
    assert app.metrics()["test_accuracy"] == pytest.approx(result["test_accuracy"])
    # Another setting on request, by the name the table uses; a name the sweep lacks lists the ones it has.
    assert load_run(bad_lr_sweep, "lr=1").choice.used == [1]
    assert main(["evaluate", str(bad_lr_sweep), "--setting", "lr=0.5"]) == 2
    assert "lr=0.001, lr=1" in capsys.readouterr().err


def test_a_sweep_prints_no_ensemble_of_all_its_settings(tmp_path, capsys):
    summary, out = run_json(capsys, "sweep", "--lr", "1e-3,3e-3", "--run-dir", str(tmp_path / "r"), *SWEEP[:4],
                            "--seeds", "2", "--json")
    assert "ensemble of all" not in out and "Ensemble: " not in out  # per epoch, and at the end
    assert "Ensemble of the best setting's 2 seeds" in out and "seeds' ensemble" in out
    # Each epoch's line is its best setting's seeds, named (here the last epoch's best is the run's best).
    best, line = summary["best"], [line for line in out.splitlines() if line.startswith("Epoch")][-1]
    assert f"| best: lr={best['lr']:g} |" in line, line
    assert f"Test Acc: {best['test_accuracy']:.4f} ± {best['test_accuracy_std']:.4f}" in line, line
    evaluated, _ = run_json(capsys, "evaluate", str(tmp_path / "r"), "--json")
    assert evaluated["test_accuracy"] == pytest.approx(summary["ensemble_test_accuracy"])
    # Plain adam decays no weights: no member, setting or best claims a weight decay.
    assert {m["weight_decay"] for m in summary["members"]} == {None} and summary["best"]["weight_decay"] is None
    assert {s["weight_decay"] for s in summary["settings"]} == {None}


def test_every_number_of_a_sweep_is_its_best_settings(bad_lr_sweep, capsys):
    # metrics.jsonl's headline fields, result.json's and evaluate's: one meaning, the best setting's seeds; never a
    # mean across settings (lr 1e-3 at ~90% and lr 1 at chance once averaged to ~50%).
    result = json.loads((bad_lr_sweep / "result.json").read_text())
    last = json.loads((bad_lr_sweep / "metrics.jsonl").read_text().splitlines()[-1])
    for field, key in (("test_accuracy", "test_accuracy"), ("train_accuracy", "train_accuracy"), ("loss", "final_loss")):
        assert last[field] == pytest.approx(result[key]), field
    assert last["learning_rate"] == result["best"]["lr"] and "ensemble_test_accuracy" not in last
    evaluated, out = run_json(capsys, "evaluate", str(bad_lr_sweep), "--json")
    assert "Members: " not in out and f"--setting): {100 * result['test_accuracy']:.2f}%\n" in out  # one seed


def test_runs_shows_the_kind_the_headline_and_the_diverged(bad_lr_sweep, diverged_sweep, tmp_path, capsys):
    root = tmp_path / "runs"
    root.mkdir()
    for name, run in (("a-sweep", bad_lr_sweep), ("b-diverged", diverged_sweep)):
        (root / name).symlink_to(run, target_is_directory=True)
    assert main(["runs", "--root", str(root), "--json"]) == 0
    listed = {Path(r["run_dir"]).name: r for r in json.loads(capsys.readouterr().out)}
    for name, run in (("a-sweep", bad_lr_sweep), ("b-diverged", diverged_sweep)):
        result = json.loads((run / "result.json").read_text())
        # One headline for a run: the number `sweep` printed (its best setting's mean), not all members' mean.
        assert listed[name]["test_accuracy"] == pytest.approx(result["test_accuracy"])
        assert listed[name]["kind"] == "sweep"
    assert listed["a-sweep"]["diverged"] == 0 and listed["b-diverged"]["diverged"] == 2
    assert main(["runs", "--root", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "sweep: 2 models" in lines[0] and "sweep: 4 models, 2 diverged" in lines[1]


def test_a_diverged_member_is_reported_as_diverged_and_used_by_no_tool(diverged_sweep, tmp_path, capsys):
    from jaxintro import serve

    loaded = load_run(diverged_sweep)
    assert loaded.choice.diverged == [2, 3] and loaded.choice.used == [0, 1]
    evaluated, out = run_json(capsys, "evaluate", str(diverged_sweep), "--json")
    assert evaluated["member_test_accuracy"][2:] == [None, None]  # not 9.72%: the argmax of NaN is class 0
    # Its best setting's seeds (members 0 and 1) as this evaluation scored them; no mean across settings.
    assert out.count("diverged") >= 2 and "Members: " not in out
    mean = np.mean(evaluated["member_test_accuracy"][:2])
    assert f"(the best; choose another with --setting): its seeds {100 * mean:.2f} ±" in out
    # Gradients through the run are finite: the page's saliency and mistakes, and grads --run.
    app = serve.load_app(diverged_sweep)
    answer = app.predict("pixels", np.linspace(0, 1, 64, dtype=np.float32))
    assert np.isfinite(answer["saliency"]).all() and np.isfinite(answer["probabilities"]).all()
    assert np.isfinite(app.mistakes.grad_norm).all()
    report, _ = run_json(capsys, "grads", "--run", str(diverged_sweep), "--n", "16", "--out", str(tmp_path / "g"),
                         "--json")
    assert np.isfinite(report["norms"]).all()
    image = digit_png(tmp_path / "one.png")
    assert main(["predict", str(diverged_sweep), str(image)]) == 0
    assert "its 2 seeds averaged" in capsys.readouterr().out


def test_the_ensemble_leaves_a_nan_member_out_of_values_and_gradients():
    rng = np.random.default_rng(0)
    log_probs = jnp.asarray(jax.nn.log_softmax(rng.normal(size=(3, 4, 10))), jnp.float32)
    poisoned = log_probs.at[1].set(jnp.nan)
    value, grad = jax.value_and_grad(lambda lp: average_probabilities(lp)[:, 0].sum())(poisoned)
    expected = jnp.log(jnp.mean(jnp.exp(log_probs[jnp.array([0, 2])]), 0))[:, 0].sum()
    assert value == pytest.approx(float(expected), rel=1e-5)
    assert np.isfinite(np.asarray(grad)).all() and not np.asarray(grad[1]).any()


def test_the_ensembles_log_probabilities_stay_finite_for_confident_members():
    np.testing.assert_allclose(average_probabilities(jnp.array([[[-200.0, 0.0]], [[-200.0, 0.0]]])),
                               [[-200.0, 0.0]], rtol=1e-6)
    model = build_model("jax", 4, (3,), 2)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(0), 2))
    params = jax.tree.map(lambda leaf: leaf * 1e4, params)  # logits of about +-1e4
    x = jnp.ones((5, 4))
    log_probs = ensemble_model(model).apply(params, x)
    assert np.isfinite(np.asarray(log_probs)).all()
    loss, grads = jax.value_and_grad(lambda p: -ensemble_model(model).apply(p, x)[:, 0].sum())(params)
    assert np.isfinite(float(loss)) and all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_the_lessons_loop_leaves_the_training_set_on_the_host():
    data = synthetic_dataset(256, 64)
    trainer = Trainer.create(TrainConfig(dataset="digits", loop="python", batch_size=32), data)
    _state, train, test = trainer.place(trainer.init_state(), data)
    assert all(isinstance(array, np.ndarray) for array in train)  # sliced per batch from the host, as the lesson does
    assert all(isinstance(array, jax.Array) for array in test)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*argv: str, timeout: float = 120, **environ: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **environ}
    return subprocess.run([sys.executable, "-m", "jaxintro.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_loop_python_with_several_processes_is_refused_before_joining(tmp_path):
    # Refused before joining: it never waits for a peer (a wait would pass the 30 s the run is given).
    proc = cli("train", "--dataset", "digits", "--loop", "python", "--coordinator", f"127.0.0.1:{free_port()}",
               "--num-processes", "2", "--process-id", "0", "--run-dir", str(tmp_path / "r"), timeout=30)
    assert proc.returncode == 2 and "--loop python is the lesson's single-device loop" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "waiting" not in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("process_id, missing", [(0, "process 1 did not join"), (1, "process 0, the coordinator")])
def test_a_peer_that_never_joins_ends_in_one_line(tmp_path, process_id, missing):
    run = tmp_path / "r"
    if process_id == 1:
        run.mkdir()  # process 1 does not claim the folder: process 0 does
    # The 4 s bound holds: the process ends within 60 s (its start, the wait, the cleanup), or `cli` times out.
    proc = cli("train", "--dataset", "digits", "--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "2",
               "--process-id", str(process_id), "--run-dir", str(run), timeout=60, JAXINTRO_DISTRIBUTED_TIMEOUT="4")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[0].startswith(f"Process {process_id} of 2: waiting up to 4s") and len(lines) == 2, lines
    assert missing in lines[1] and "JAXINTRO_DISTRIBUTED_TIMEOUT" in lines[1]
    assert "Terminating process" not in proc.stderr and "Traceback" not in proc.stderr
    assert not run.exists() if process_id == 0 else not any(run.iterdir())  # the failed start freed its folder


def test_a_member_whose_loss_explodes_finite_is_diverged_as_a_nan_member_is(tmp_path, capsys):
    """Adam at lr 3000 never reaches NaN, its loss only explodes: that member is left out and reported, the run's
    files and its page are valid JSON, and the listing counts it."""
    run = tmp_path / "r"
    with pytest.warns(RuntimeWarning, match=r"member 1 diverged: loss reached .* \(finite, but exploded\)"):
        assert main(["sweep", "--lr", "1e-3,3e3", "--run-dir", str(run), *SWEEP]) == 0
    strict = dict(parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))
    result = json.loads((run / "result.json").read_text(), **strict)
    assert [m["test_accuracy"] is None for m in result["members"]] == [False, True]
    assert result["settings"][1]["diverged"] == 1 and result["best"]["lr"] == 1e-3
    rows = [json.loads(line, **strict) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["members"]["test_accuracy"][1] is None
    capsys.readouterr()
    assert main(["runs", "--root", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["diverged"] == 1


def test_setting_is_refused_for_a_run_that_is_not_a_sweep(digits_run, two_seeds_dir, capsys):
    for run in (digits_run, two_seeds_dir):
        assert main(["evaluate", str(run), "--setting", "lr=1e-3"]) == 2
        assert "--setting chooses one setting of a sweep; this run is not a sweep" in capsys.readouterr().err


@pytest.fixture(scope="module")
def two_seeds_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("seeds") / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--seeds", "2", "--run-dir", str(run)]) == 0
    return run
