"""Data parallelism: N devices equal one device on the same global batch; two processes equal one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxintro.cli import main
from jaxintro.evaluate import load_run

# Runs in a fresh interpreter: the CPU device count must be set before JAX starts.
N_DEVICE_CHECK = textwrap.dedent("""
    import json, sys, dataclasses
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from conftest import synthetic_dataset
    from jaxintro.config import TrainConfig
    from jaxintro.train import fit
    n_train = int(sys.argv[2])  # 64: one step of one global batch; 512: sixteen steps
    ds = synthetic_dataset(n_train=n_train, side=8)
    out = {}
    for devices, parallel in [(1, "shard_map"), (4, "shard_map"), (4, "sharding"), (2, "shard_map")]:
        config = TrainConfig(epochs=1 if n_train == 64 else 2, batch_size=64, devices=devices, parallel=parallel,
                             seed=5, optimizer=sys.argv[3], lr=0.05 if sys.argv[3] == "sgd" else 1e-3)
        result = fit(config, ds, log=lambda _: None)
        leaves = jax.tree.leaves(result.state.params)
        out[f"{devices}-{parallel}"] = {
            "params": [np.asarray(leaf.addressable_data(0)).tolist() for leaf in leaves],
            "losses": np.concatenate([m["loss"] for m in result.step_metrics]).tolist(),
            "grad_norms": np.concatenate([m["grad_norm"] for m in result.step_metrics]).tolist(),
            "devices": len(result.state.params["layer1"]["w"].sharding.device_set),
        }
    print(json.dumps(out))
""")


@pytest.mark.parametrize("n_train, optimizer, rtol, compare_params", [
    (64, "sgd", 1e-5, True), (512, "sgd", 1e-5, True), (64, "adam", 1e-5, False), (512, "adam", 1e-4, False)],
    ids=["sgd-one-step", "sgd-sixteen-steps", "adam-one-step", "adam-sixteen-steps"])
def test_n_device_steps_equal_the_one_device_step(n_train, optimizer, rtol, compare_params):
    """The averaged gradient is the same to 1e-5. Parameters are compared under SGD: Adam's first step is
    lr * g / |g|, which turns a 1e-9 difference in a near-zero gradient into a sign flip."""
    tests_dir = os.path.dirname(__file__)
    proc = subprocess.run([sys.executable, "-c", N_DEVICE_CHECK, tests_dir, str(n_train), optimizer],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    one = runs.pop("1-shard_map")
    assert one["devices"] == 1
    for name, run in runs.items():
        assert run["devices"] == int(name.split("-")[0])
        np.testing.assert_allclose(run["losses"], one["losses"], rtol=rtol, err_msg=name)
        np.testing.assert_allclose(run["grad_norms"], one["grad_norms"], rtol=rtol, err_msg=name)
        for got, want in zip(run["params"] if compare_params else [], one["params"]):
            got, want = np.asarray(got), np.asarray(want)
            assert np.linalg.norm(got - want) <= rtol * np.linalg.norm(want), name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(rank: int, port: int, run_dir, epochs: int = 2, extra=()) -> subprocess.Popen:
    env = {**os.environ, "JAXINTRO_DISTRIBUTED_TIMEOUT": "30", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "jaxintro.cli", "train", "--dataset", "digits", "--epochs", str(epochs),
         "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(rank),
         "--run-dir", str(run_dir), "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_two_processes_agree_with_each_other_and_with_one_process(tmp_path, capsys):
    port = free_port()
    procs = [launch(rank, port, tmp_path / "multi") for rank in (0, 1)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-2000:]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert summaries[0]["processes"] == 2 and summaries[0]["devices"] == 2
    for key in ("test_accuracy", "train_accuracy", "final_loss"):
        assert summaries[0][key] == summaries[1][key]
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--run-dir", str(tmp_path / "single"), "--json"]) == 0
    single = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summaries[0]["final_loss"] == pytest.approx(single["final_loss"], rel=1e-5)
    multi_params, single_params = load_run(tmp_path / "multi").params, load_run(tmp_path / "single").params
    for got, want in zip(jax.tree.leaves(multi_params), jax.tree.leaves(single_params)):
        got, want = np.asarray(got), np.asarray(want)
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


def test_a_taken_port_is_refused_before_anything_is_written(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["train", "--dataset", "digits", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                     "--process-id", "0", "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert "already in use" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flags, message", [
    (["--process-id", "1"], "need --coordinator"),
    (["--coordinator", "nohost", "--num-processes", "2", "--run-dir", "x"], "HOST:PORT"),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2", "--run-dir", "x"],
     "--process-id must be in 0..1"),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2"], "needs --run-dir"),
    (["--batch-size", "127", "--devices", "2"], "does not split over 2 devices"),
])
def test_bad_parallel_flags_are_one_line_errors(flags, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", "digits", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
