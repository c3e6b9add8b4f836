"""Data parallelism: N devices equal one device on the same global batch (two processes: test_cluster.py)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Iterator

import jax
import numpy as np
import pytest

import jaxintro
from conftest import once_per_run, synthetic_dataset
from jaxintro import layout, parallel
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError, JaxintroError
from jaxintro.train import Trainer, fit

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


def run_summary(optimizer: str, devices: int, parallel: str, dropout: float = 0.0) -> dict:
    """Two epochs of 8 global batches (sixteen steps, one reshuffle) on `devices` devices: every step's metrics and
    the final parameters, as JSON."""
    config = TrainConfig(epochs=2, batch_size=64, devices=devices, parallel=parallel, seed=5, optimizer=optimizer,
                         lr=0.05 if optimizer == "sgd" else 1e-3, dropout=dropout, record_grad_norm=True)
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
def test_split_steps_on_n_devices_equal_the_one_device_step(n_device_runs, optimizer, first_rtol, rtol, compare_params):
    """The averaged gradient is the same to 1e-5 at the first step. Parameters are compared under SGD: Adam's first
    step is lr * g / |g|, which turns a 1e-9 difference in a near-zero gradient into a sign flip.

    The one-device run trains here, in the test's own process, where `make mutation` sees which functions the test
    calls; the N-device runs train in the child, on the same code."""
    one = run_summary(optimizer, 1, "shard_map")
    assert one["devices"] == 1 and len(one["losses"]) == 16
    # The split programs on a mesh of one device (a run of one device compiles the lesson's epoch as it is): here,
    # the test's own process runs the code the child runs on 2 and 4 (once: the optimizer is not theirs to change).
    split = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layout.OneModel, "jit_epoch",
                      lambda self: layout.split_epoch(self.config, self.model, self.tx, self.mesh))
        for parallel in ("shard_map", "sharding") if optimizer == "sgd" else ():
            split[f"1-{parallel}"] = run_summary(optimizer, 1, parallel)
    for name, run in {**split, **n_device_runs[optimizer]}.items():
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


# ---------------------------------------------------------------- joining a cluster, in this process
# test_cluster.py starts real multi-process runs; these pin each rule of joining one, with JAX's side faked.

LAUNCHERS = {
    "mpi": {"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5000", "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_RANK": "3"},
    "slurm": {"SLURM_JOB_ID": "77", "SLURM_STEP_NODELIST": "node[1-3]", "SLURM_NTASKS": "3", "SLURM_PROCID": "2",
              "SLURM_LOCALID": "0"},
    "kubernetes": {"JOB_COMPLETION_INDEX": "1", "JAX_COORDINATOR_ADDRESS": "train-0.train:1234",
                   "JAX_NUM_PROCESSES": "5"},
}
NO_LAUNCHER = ("--coordinator auto found no SLURM step (run it under srun), Open MPI job (mpirun) or Kubernetes "
               "indexed Job (JOB_COMPLETION_INDEX, JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES) in the environment; "
               "or pass --coordinator HOST:PORT --num-processes N --process-id I (see docs/parallel.md)")


@pytest.fixture
def launcher_env(monkeypatch):
    """Set the named launchers' variables, with none of any launcher inherited from the machine."""
    for variables in LAUNCHERS.values():
        for name in variables:
            monkeypatch.delenv(name, raising=False)

    def set_env(*names: str, drop: str | None = None) -> None:
        for name in names:
            for variable, value in LAUNCHERS[name].items():
                if variable != drop:
                    monkeypatch.setenv(variable, value)

    return set_env


@pytest.mark.parametrize("launchers, expected", [
    (("mpi",), ("auto", 4, 3)),
    (("slurm",), ("auto", 3, 2)),
    (("kubernetes",), ("train-0.train:1234", 5, 1)),
    (("mpi", "slurm", "kubernetes"), ("auto", 4, 3)),  # JAX's own order: Open MPI, then SLURM
    (("slurm", "kubernetes"), ("auto", 3, 2)),
])
def test_a_launchers_variables_give_the_cluster(launcher_env, launchers, expected):
    launcher_env(*launchers)
    assert parallel.detect_cluster() == expected


@pytest.mark.parametrize("launcher, dropped", [(name, variable) for name, variables in LAUNCHERS.items()
                                               for variable in variables if variable not in ("OMPI_COMM_WORLD_SIZE",
                                                                                             "OMPI_COMM_WORLD_RANK")])
def test_a_launcher_missing_one_variable_is_no_launcher(launcher_env, launcher, dropped):
    launcher_env(launcher, drop=dropped)
    with pytest.raises(ConfigError) as err:
        parallel.detect_cluster()
    assert str(err.value) == NO_LAUNCHER


class Exited(Exception):
    """What the faked `os._exit` raises: the watchdog's exit, seen by the test."""


@pytest.mark.parametrize("num_processes, process_id, missing", [
    (2, 0, "process 1"),
    (2, 1, "process 0, the coordinator at 10.0.0.1:1234,"),
    (3, 0, "at least one of the other 2 processes"),
    (3, 2, "at least one of the other 2 processes"),  # the coordinator cannot say who is missing
])
def test_the_watchdog_names_who_did_not_join_then_exits(monkeypatch, capsys, num_processes, process_id, missing):
    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(parallel.os, "_exit", exit_)
    given_up = []
    with pytest.raises(Exited) as exited:
        parallel._give_up_joining("10.0.0.1:1234", num_processes, process_id, 7, lambda: given_up.append(True))
    assert exited.value.args == (parallel.EXIT_NOT_JOINED,) and given_up == [True]
    assert capsys.readouterr().err == (
        f"jaxintro train: error: {missing} did not join the {num_processes}-process run at 10.0.0.1:1234 within "
        "7s (JAXINTRO_DISTRIBUTED_TIMEOUT); start it with the same --coordinator and --num-processes and its own "
        "--process-id\n")


def test_the_watchdog_exits_even_when_its_last_words_fail(monkeypatch, capsys):
    def exit_(code):
        raise Exited(code)

    def on_give_up():
        raise OSError("the run folder is gone")

    monkeypatch.setattr(parallel.os, "_exit", exit_)
    with pytest.raises(Exited):
        parallel._give_up_joining("10.0.0.1:1234", 2, 0, 7, on_give_up)


class Watchdog:
    """A stand-in for `threading.Timer` that records what it was given and never fires."""

    made: list[Watchdog] = []

    def __init__(self, interval, function, args):
        self.interval, self.function, self.args = interval, function, args
        self.daemon, self.started, self.cancelled = False, False, False
        Watchdog.made.append(self)

    def start(self):
        self.started = True

    def cancel(self):
        self.cancelled = True


@pytest.fixture
def faked_join(monkeypatch):
    """`initialize_distributed` with JAX's joining, config and the watchdog's timer recorded instead of done."""
    joined, updated = [], []
    Watchdog.made = []
    monkeypatch.setattr(parallel.threading, "Timer", Watchdog)
    monkeypatch.setattr(jax.config, "update", lambda name, value: updated.append((name, value)))
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: joined.append(kwargs))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=true")
    return joined, updated


@pytest.mark.parametrize("timeout, heartbeat", [(7, 10), (41, 20)])
def test_joining_bounds_every_wait_by_the_same_timeout(faked_join, monkeypatch, capsys, timeout, heartbeat):
    joined, updated = faked_join
    monkeypatch.setenv("JAXINTRO_DISTRIBUTED_TIMEOUT", str(timeout))
    on_give_up = lambda: None  # noqa: E731
    parallel.initialize_distributed("10.0.0.1:1234", 2, 1, on_give_up)
    assert capsys.readouterr().err == f"Process 1 of 2: waiting up to {timeout}s for the others at 10.0.0.1:1234 ...\n"
    assert os.environ["XLA_FLAGS"] == f"--xla_cpu_use_thunk_runtime=true --xla_cpu_collective_timeout_seconds={timeout}"
    assert updated == [("jax_cpu_collectives_implementation", "gloo")]
    assert joined == [dict(coordinator_address="10.0.0.1:1234", num_processes=2, process_id=1,
                           cluster_detection_method="deactivate", initialization_timeout=timeout + 10,
                           heartbeat_timeout_seconds=heartbeat, shutdown_timeout_seconds=timeout)]
    [watchdog] = Watchdog.made
    assert (watchdog.interval, watchdog.function, watchdog.args) == (
        timeout, parallel._give_up_joining, ("10.0.0.1:1234", 2, 1, timeout, on_give_up))
    assert watchdog.daemon and watchdog.started and watchdog.cancelled


def test_joining_auto_leaves_the_address_to_jax(faked_join, monkeypatch):
    joined, _updated = faked_join
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.delenv("JAXINTRO_DISTRIBUTED_TIMEOUT", raising=False)
    parallel.initialize_distributed("auto", 3, 0)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_collective_timeout_seconds=60"
    assert joined == [dict(initialization_timeout=70, heartbeat_timeout_seconds=30, shutdown_timeout_seconds=60)]


def test_a_failed_join_is_one_error_naming_the_run_and_the_cause(faked_join, monkeypatch):
    def refuse(**_kwargs):
        raise RuntimeError("DEADLINE_EXCEEDED: " + "x" * 300 + "\nthe stack, line by line")

    monkeypatch.setattr(jax.distributed, "initialize", refuse)
    monkeypatch.setenv("JAXINTRO_DISTRIBUTED_TIMEOUT", "7")
    with pytest.raises(JaxintroError) as err:
        parallel.initialize_distributed("10.0.0.1:1234", 2, 1)
    cause = ("DEADLINE_EXCEEDED: " + "x" * 300)[:200]
    assert str(err.value) == (
        f"could not join the 2-process run at 10.0.0.1:1234 within 7s (RuntimeError: {cause}); check that every "
        "process was started with the same --coordinator and --num-processes and a distinct --process-id")
    assert err.value.__cause__ is None and err.value.__suppress_context__  # one line, not JAX's chain
    assert Watchdog.made[0].cancelled


def test_one_process_that_sees_its_folder_passes_and_leaves_nothing(tmp_path):
    parallel.check_cluster(tmp_path, "--run-dir", 1)
    assert list(tmp_path.iterdir()) == []


def test_processes_that_disagree_on_their_count_are_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        parallel.check_cluster(tmp_path, "--run-dir", 2)
    assert str(err.value) == ("the processes disagree on --num-processes (process 0: 2); the run has 1 processes: "
                              "start every process with the same --num-processes")


def test_a_folder_the_processes_do_not_share_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda: 1)  # process 0's token is written on another host
    monkeypatch.setattr(parallel, "SHARED_FOLDER_WAIT_S", 0.2)
    with pytest.raises(ConfigError) as err:
        parallel.check_cluster(tmp_path, "--checkpoint-dir", 1)
    assert str(err.value) == (
        f"--checkpoint-dir {tmp_path} is not one folder that every process sees: process(es) 0 do not see the file "
        "process 0 wrote into it; give every process the same --checkpoint-dir on a filesystem they share (NFS or "
        "a cluster filesystem), since checkpoints are written together into one folder")


def test_a_cluster_of_three_is_told_who_disagrees_and_who_is_blind(tmp_path, monkeypatch):
    from jax.experimental import multihost_utils

    gathered = iter([np.asarray([3, 2, 3], np.int32), np.asarray([3, 3, 3], np.int32), np.asarray([1, 0, 0])])
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda _value: next(gathered))
    monkeypatch.setattr(multihost_utils, "broadcast_one_to_all", lambda value: value)
    monkeypatch.setattr(parallel, "SHARED_FOLDER_WAIT_S", 0.2)
    with pytest.raises(ConfigError) as err:
        parallel.check_cluster(tmp_path, "--run-dir", 3)
    assert str(err.value) == ("the processes disagree on --num-processes (process 0: 3, process 1: 2, process 2: 3); "
                              "the run has 3 processes: start every process with the same --num-processes")
    with pytest.raises(ConfigError) as err:
        parallel.check_cluster(tmp_path, "--run-dir", 3)
    assert "process(es) 1, 2 do not see the file process 0 wrote into it" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # process 0 took its token back


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port of 127.0.0.2 taken by a listening socket (on Linux every 127.x address is this machine's)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.2", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.mark.parametrize("coordinator, num_processes, process_id, error", [
    ("127.0.0.1:1234", 2, 2, "--process-id must be in 0..1; got 2"),
    ("127.0.0.1:1234", 2, -1, "--process-id must be in 0..1; got -1"),
    ("127.0.0.1:1234", 0, 0, "--process-id must be in 0..-1; got 0"),
    ("auto", 1, 0, None),
    ("auto", 4, 3, None),
    ("nohost", 2, 1, "--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got 'nohost'"),
    (":1234", 2, 1, "--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got ':1234'"),
    ("host:x1", 2, 1, "--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got 'host:x1'"),
    ("host:0", 2, 1, "--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got 'host:0'"),
    ("host:65536", 2, 1, "--coordinator must be HOST:PORT, e.g. 127.0.0.1:12355; got 'host:65536'"),
    ("host:1", 2, 1, None),
    ("host:65535", 2, 1, None),
    ("fd00::a:1234", 2, 1, None),  # the port is what follows the last colon
])
def test_a_coordinator_address_and_process_id_are_checked(coordinator, num_processes, process_id, error):
    if error is None:
        parallel.check_coordinator(coordinator, num_processes, process_id)
        return
    with pytest.raises(ConfigError) as err:
        parallel.check_coordinator(coordinator, num_processes, process_id)
    assert str(err.value) == error


def test_process_0_refuses_a_port_taken_where_it_listens(busy_port):
    with pytest.raises(ConfigError) as err:
        parallel.check_coordinator(f"127.0.0.2:{busy_port}", 2, 0)
    assert str(err.value) == f"--coordinator port {busy_port} is already in use on 127.0.0.2; choose another port"
    parallel.check_coordinator(f"127.0.0.2:{busy_port}", 2, 1)  # only process 0 listens there
    parallel.check_coordinator(f"127.0.0.1:{busy_port}", 2, 0)  # another address of this machine: free
    with pytest.raises(ConfigError):
        parallel.check_coordinator(f"0.0.0.0:{busy_port}", 2, 0)  # every address: this one too


def test_process_0_listening_on_every_address_takes_a_free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    parallel.check_coordinator(f"0.0.0.0:{free}", 2, 0)


@pytest.mark.parametrize("host, local", [("localhost", True), ("0.0.0.0", True), ("", True), ("127.0.0.1", True),
                                         ("127.1.2.3", True), ("10.0.0.1", False), ("train-0", False)])
def test_which_coordinator_hosts_are_this_machine(host, local):
    assert parallel._is_local(host) is local


@pytest.mark.parametrize("value, seconds", [(None, 60), ("1", 1), ("600", 600), ("0", None), ("-5", None),
                                            ("1.5", None), ("abc", None), ("", None)])
def test_the_distributed_timeout_is_whole_seconds_of_at_least_one(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("JAXINTRO_DISTRIBUTED_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("JAXINTRO_DISTRIBUTED_TIMEOUT", value)
    if seconds is not None:
        assert parallel.distributed_timeout() == seconds
        return
    with pytest.raises(ConfigError) as err:
        parallel.distributed_timeout()
    assert str(err.value) == f"JAXINTRO_DISTRIBUTED_TIMEOUT must be a whole number of seconds >= 1; got {value!r}"


def test_the_lines_said_before_waiting_and_before_exiting_are_flushed(faked_join, monkeypatch):
    # os._exit skips Python's buffers, and joining blocks in C++: both lines must be out before either.
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="utf-8"))  # buffered, as a pipe's is
    monkeypatch.setattr(parallel.os, "_exit", lambda code: None)
    parallel.initialize_distributed("10.0.0.1:1234", 2, 1)
    assert raw.getvalue().decode().endswith("waiting up to 60s for the others at 10.0.0.1:1234 ...\n")
    parallel._give_up_joining("10.0.0.1:1234", 2, 1, 60, lambda: None)
    assert raw.getvalue().decode().endswith("and its own --process-id\n")


def test_a_token_that_shows_late_on_a_network_filesystem_is_waited_for(tmp_path, monkeypatch):
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_index", lambda: 1)  # process 0 writes the token from another host
    monkeypatch.setattr(multihost_utils, "broadcast_one_to_all", lambda _nonce: np.int64(12345))
    late = threading.Timer(0.3, (tmp_path / ".shared-check-12345").write_text, ("written by process 0\n",))
    late.start()
    try:
        parallel.check_cluster(tmp_path, "--run-dir", 1)  # waits up to SHARED_FOLDER_WAIT_S for it
    finally:
        late.cancel()
        late.join(timeout=10)


@pytest.mark.parametrize("quota, cores", [(None, 6), ("max 100000\n", 6), ("200000 100000\n", 2),
                                          ("1000000 100000\n", 6), ("50000 100000\n", 1), ("150000 100000\n", 1),
                                          ("garbled\n", 6), ("", 6)])
def test_the_usable_cores_are_the_affinity_capped_by_a_containers_quota(tmp_path, monkeypatch, quota, cores):
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    cpu_max = tmp_path / "cpu.max"  # cgroup v2's "QUOTA PERIOD", or "max PERIOD" when unlimited
    if quota is not None:
        cpu_max.write_text(quota)
    monkeypatch.setattr(parallel, "CPU_QUOTA", cpu_max)
    assert parallel.usable_cores() == cores


def test_on_one_device_the_split_programs_draw_the_lesson_epochs_dropout_masks(monkeypatch):
    """On one device each split program is the lesson's epoch, dropout masks included (on several, each device folds
    its index into the key: other examples, other masks, so no N-device run equals a one-device run with dropout)."""
    one = run_summary("sgd", 1, "shard_map", dropout=0.3)
    monkeypatch.setattr(layout.OneModel, "jit_epoch",
                        lambda self: layout.split_epoch(self.config, self.model, self.tx, self.mesh))
    without = run_summary("sgd", 1, "shard_map")
    assert without["losses"] != one["losses"]  # the masks change the run
    for parallel in ("shard_map", "sharding"):
        split = run_summary("sgd", 1, parallel, dropout=0.3)
        assert split["correct"] == one["correct"], parallel
        np.testing.assert_allclose(split["losses"], one["losses"], rtol=1e-5, err_msg=parallel)


@pytest.mark.parametrize("parallel, module, batch_split", [("shard_map", "jit_data_parallel_epoch", False),
                                                          ("sharding", "jit_train_epoch", True)])
def test_each_parallel_flag_compiles_its_own_program_and_donates_the_state(parallel, module, batch_split):
    """`shard_map` compiles the per-device epoch; `sharding` the lesson's epoch with each batch laid out along the
    mesh's axis (`<@mesh, [{"data"}, ...]>`), where XLA splits the work."""
    config = TrainConfig(epochs=1, batch_size=64, parallel=parallel, seed=5)
    dataset = synthetic_dataset(n_train=256, side=8)
    trainer = Trainer.create(config, dataset)
    state, (x, y), _test = trainer.place(trainer.init_state(), dataset)
    epoch = layout.split_epoch(config, trainer.model, trainer.tx, trainer.mesh)
    _key, batches, dropout_key = jax.jit(trainer.layout.plan_fn(len(x)))(state.key)
    program = epoch.lower(state.params, state.opt_state, batches, dropout_key, x, y).as_text()
    assert program.startswith(f"module @{module} ")
    assert ('<@mesh, [{"data"}' in program) is batch_split
    epoch(state.params, state.opt_state, batches, dropout_key, x, y)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves((state.params, state.opt_state)))  # donated
    assert not any(a.is_deleted() for a in (batches, dropout_key, x, y))


# ---------------------------------------------------------------- where the state and the data are placed


def assert_replicated(tree, mesh, expected) -> None:
    """Every leaf of `tree` is an array copied on all of `mesh`'s devices, holding `expected`'s values."""
    for leaf, want in zip(jax.tree.leaves(tree), jax.tree.leaves(expected), strict=True):
        assert leaf.sharding == parallel.replicated_sharding(mesh)
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            assert str(jax.random.key_impl(leaf)) == str(jax.random.key_impl(want))
            leaf, want = jax.random.key_data(leaf), jax.random.key_data(want)
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(want))


def test_replicate_copies_every_array_and_key_onto_the_whole_mesh():
    mesh = parallel.make_mesh(jax.device_count())  # one device in make test: the sharding still names the mesh
    tree = {"host": np.arange(6, dtype=np.uint8).reshape(2, 3), "device": jax.numpy.ones(3),
            "key": jax.random.key(3, impl="rbg"), "keys": jax.random.split(jax.random.key(4), 2)}
    assert_replicated(parallel.replicate(tree, mesh), mesh, tree)


@pytest.mark.parametrize("loop", ["scan", "python"])
def test_a_model_s_state_and_data_are_placed_as_its_loop_reads_them(loop, tiny):
    trainer = Trainer.create(TrainConfig(dataset="digits", loop=loop), tiny)
    state = trainer.init_state()
    placed, train, test = trainer.layout.place(state, tiny)
    if loop == "scan":  # one compiled epoch: the state and both sets on every device
        assert_replicated((placed.params, placed.opt_state, placed.key), trainer.mesh,
                          (state.params, state.opt_state, state.key))
        assert_replicated((train, test), trainer.mesh, ((tiny.x_train, tiny.y_train), (tiny.x_test, tiny.y_test)))
    else:  # the lesson's loop slices batches on the host: the training set stays there
        assert placed is state and train[0] is tiny.x_train and train[1] is tiny.y_train
        assert all(isinstance(leaf, jax.Array) for leaf in test)
        np.testing.assert_array_equal(np.asarray(test[0]), tiny.x_test)
        np.testing.assert_array_equal(np.asarray(test[1]), tiny.y_test)
    assert placed.epoch == state.epoch


def test_more_devices_than_jax_sees_is_refused_with_what_it_sees():
    seen = jax.device_count()
    with pytest.raises(ConfigError) as raised:
        parallel.make_mesh(seen + 1)
    platform = jax.devices()[0].platform
    assert str(raised.value) == (f"--devices {seen + 1} but JAX sees {seen} {platform} device(s); on a CPU, jaxintro "
                                 f"creates them when --devices is given before JAX starts; elsewhere use at most {seen}")


HOST_INIT_CHECK = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_default_device", jax.devices()[1])  # as an accelerator would be: not the host's CPU
    sys.path.insert(0, sys.argv[1])
    from conftest import synthetic_dataset
    from jaxintro.config import TrainConfig
    from jaxintro.train import Trainer
    out = {}
    for seeds in (1, 3):
        state = Trainer.create(TrainConfig(seeds=seeds), synthetic_dataset()).init_state()
        out[seeds] = sorted({str(device) for leaf in jax.tree.leaves(state[:3]) for device in leaf.devices()})
    print(json.dumps(out))
""")


def test_the_initial_weights_are_drawn_on_the_host_cpu_not_on_the_default_device():
    """On an accelerator each op of the init would be a program compiled for the chip; on the host's CPU it is the
    same bits on every backend. Here the default device is a second CPU device, standing in for the chip."""
    env = {**os.environ, "PYTHONPATH": str(Path(jaxintro.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-c", HOST_INIT_CHECK, os.path.dirname(__file__)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"1": ["cpu:0"], "3": ["cpu:0"]}
