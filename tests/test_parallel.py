"""Data parallelism: N devices equal one device on the same global batch (two processes: test_cluster.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxintro
from conftest import once_per_run, synthetic_dataset
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.train import fit

# Runs in a fresh interpreter: the CPU device count must be set before JAX starts. It imports the jaxintro the
# tests import (PYTHONPATH below): under `make mutation` that is the mutated copy, and the mutant the test's own
# process runs (mutmut names it in the environment, which the child inherits) runs in the child too.
N_DEVICE_CHECK = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    sys.path.insert(0, sys.argv[1])
    from test_parallel import run_summary
    out = {}
    for optimizer in json.loads(sys.argv[2]):
        for devices, parallel in [(4, "shard_map"), (4, "sharding"), (2, "shard_map")]:
            out.setdefault(optimizer, {})[f"{devices}-{parallel}"] = run_summary(optimizer, devices, parallel)
    print(json.dumps(out))
""")
# (optimizer, tolerance after the first step, after sixteen, parameters compared)
CASES = [("sgd", 1e-5, 1e-5, True), ("adam", 1e-5, 1e-4, False)]


def run_summary(optimizer: str, devices: int, parallel: str) -> dict:
    """Two epochs of 8 global batches (sixteen steps, one reshuffle) on `devices` devices: every step's metrics and
    the final parameters, as JSON."""
    config = TrainConfig(epochs=2, batch_size=64, devices=devices, parallel=parallel, seed=5, optimizer=optimizer,
                         lr=0.05 if optimizer == "sgd" else 1e-3)
    result = fit(config, synthetic_dataset(n_train=512, side=8), log=lambda _: None)
    return {"params": [np.asarray(leaf.addressable_data(0)).tolist() for leaf in jax.tree.leaves(result.state.params)],
            **{key: np.concatenate([m[name] for m in result.step_metrics]).tolist()
               for key, name in (("losses", "loss"), ("grad_norms", "grad_norm"), ("correct", "correct"))},
            "devices": len(result.state.params["layer1"]["w"].sharding.device_set)}


@pytest.fixture(scope="module")
def n_device_runs(tmp_path_factory) -> dict:
    """Every case's runs on 2 and 4 devices, from one fresh interpreter started with 4 CPU devices."""

    def run(_folder: Path) -> dict:
        optimizers = json.dumps([case[0] for case in CASES])
        env = {**os.environ, "PYTHONPATH": str(Path(jaxintro.__file__).parents[1])}
        proc = subprocess.run([sys.executable, "-c", N_DEVICE_CHECK, os.path.dirname(__file__), optimizers],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return once_per_run(tmp_path_factory, "n-device-runs", run)[1]


@pytest.mark.parametrize("optimizer, first_rtol, rtol, compare_params", CASES, ids=[case[0] for case in CASES])
def test_n_device_steps_equal_the_one_device_step(n_device_runs, optimizer, first_rtol, rtol, compare_params):
    """The averaged gradient is the same to 1e-5 at the first step. Parameters are compared under SGD: Adam's first
    step is lr * g / |g|, which turns a 1e-9 difference in a near-zero gradient into a sign flip.

    The one-device run trains here, in the test's own process, where `make mutation` sees which functions the test
    calls; the N-device runs train in the child, on the same code."""
    one = run_summary(optimizer, 1, "shard_map")
    assert one["devices"] == 1 and len(one["losses"]) == 16
    for name, run in n_device_runs[optimizer].items():
        assert run["devices"] == int(name.split("-")[0])
        assert run["correct"] == one["correct"], name  # every example counted once: summed over devices, not averaged
        for key in ("losses", "grad_norms"):
            np.testing.assert_allclose(run[key][0], one[key][0], rtol=first_rtol, err_msg=name)
            np.testing.assert_allclose(run[key], one[key], rtol=rtol, err_msg=name)
        for got, want in zip(run["params"] if compare_params else [], one["params"]):
            got, want = np.asarray(got), np.asarray(want)
            assert np.linalg.norm(got - want) <= rtol * np.linalg.norm(want), name


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
