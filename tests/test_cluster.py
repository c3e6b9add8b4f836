"""The multi-process fault matrix on 127.0.0.1: every fault ends every process within a bound, none hangs.

Two processes train `digits` together (`jax.distributed`, gloo on CPU); the run no fault touched is
checked against one process. Each row injects one fault (the three peer faults in three pairs at once)
and checks the exit code and message of every process, the time each took to exit, and, where a
checkpoint was promised, that resuming reaches the uninterrupted result. Every child is killed in a
`finally`, whatever happens. `pytest tests/test_cluster.py -s` prints the measured exit times (the
table in docs/reliability.md).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import jax
import numpy as np
import pytest

from conftest import once_per_run
from jaxintro.cli import main
from jaxintro.evaluate import load_run

# JAXINTRO_DISTRIBUTED_TIMEOUT in these tests (half of it in the rows where nobody trains): heartbeats time out
# after 10 s.
TIMEOUT_S = 20
EPOCHS = 10  # long enough that a signal sent after epoch 1 lands well before the end (a stop comes 1-2 epochs after)
TIMES: list[tuple[str, str]] = []  # (row, measured exits), printed at the end of the module


@pytest.fixture(scope="module", autouse=True)
def report_times() -> Iterator[None]:
    yield
    if TIMES:
        print("\n| fault | every process exited after |\n| --- | --- |")
        for row, times in TIMES:
            print(f"| {row} | {times} |")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "JAXINTRO_DISTRIBUTED_TIMEOUT": str(TIMEOUT_S), "PYTHONUNBUFFERED": "1", **extra}


def launch(argv: list[str], environ: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "train", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ or env())


def pair_argv(port: int, rank: int, run_dir: Path, *extra: str, processes: int = 2) -> list[str]:
    return ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes), "--process-id", str(rank),
            "--run-dir", str(run_dir), "--json", *extra]


@contextlib.contextmanager
def processes(*argvs: list[str], environs: list[dict[str, str]] | None = None) -> Iterator[list[subprocess.Popen]]:
    """Start one process per argv; whatever happens, none outlives the block."""
    procs: list[subprocess.Popen] = []
    try:
        for i, argv in enumerate(argvs):
            procs.append(launch(argv, environs[i] if environs else None))
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)  # a stopped process cannot die of SIGKILL until it runs
                p.kill()
            p.communicate(timeout=30)


def wait_for_epoch(proc: subprocess.Popen, epoch: int, bound: float = 180) -> None:
    deadline = time.monotonic() + bound
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("Epoch") and int(line.split("|")[0].split()[1]) >= epoch:
            return
        assert time.monotonic() < deadline, "no progress"
    raise AssertionError(f"training ended before epoch {epoch}: {proc.stderr.read()[-2000:]}")  # type: ignore


def finish(procs: list[subprocess.Popen], since: float, bound: float) -> list[tuple[int, str, str, float]]:
    """Wait for every process (at most `bound` seconds in all): (exit code, stdout, stderr, seconds since `since`)."""
    results = []
    for p in procs:
        out, err = p.communicate(timeout=max(1.0, bound - (time.monotonic() - since)))
        results.append((p.returncode, out, err, time.monotonic() - since))
    return results


def summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[list[dict], Path]:
    """The 2-process run of EPOCHS epochs that no fault touched: each process's summary, and the run's folder."""
    def train(folder: Path) -> list[dict]:
        port = free_port()
        with processes(pair_argv(port, 0, folder / "r", "--dataset", "digits", "--epochs", str(EPOCHS)),
                       pair_argv(port, 1, folder / "r", "--dataset", "digits", "--epochs", str(EPOCHS))) as procs:
            results = finish(procs, time.monotonic(), 600)
        for code, _, err, _ in results:
            assert code == 0, err[-2000:]
        return [summary(out) for _, out, _, _ in results]

    folder, summaries = once_per_run(tmp_path_factory, "whole", train)
    return summaries, folder / "r"


@pytest.fixture(scope="module")
def uninterrupted(whole) -> dict:
    """Process 0's summary of the run no fault touched."""
    return whole[0][0]


def test_two_processes_agree_with_each_other_and_with_one_process(whole, tmp_path, capsys):
    summaries, run = whole
    assert summaries[0]["processes"] == 2 and summaries[0]["devices"] == 2
    for key in ("test_accuracy", "train_accuracy", "final_loss"):
        assert summaries[0][key] == summaries[1][key]
    # One process training the same global batches: the same run, up to float32 reassociation of the mean
    # (measured after 16 epochs: parameters within 4.5e-7 of each other, relative; the loss within 1.1e-7; these
    # runs train 10).
    assert main(["train", "--dataset", "digits", "--epochs", str(EPOCHS), "--run-dir", str(tmp_path / "single"),
                 "--json"]) == 0
    single = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summaries[0]["final_loss"] == pytest.approx(single["final_loss"], rel=1e-5)
    for got, want in zip(jax.tree.leaves(load_run(run).params), jax.tree.leaves(load_run(tmp_path / "single").params)):
        got, want = np.asarray(got), np.asarray(want)
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


# The rows that signal a training pair once its process 0 reports epoch 1: whom, and with which signal.
SIGNALS = {"sigterm-0": ((0,), signal.SIGTERM), "sigterm-1": ((1,), signal.SIGTERM),
           "sigterm-both": ((0, 1), signal.SIGTERM), "ctrl-c-in-1": ((1,), signal.SIGINT)}


@pytest.fixture(scope="module")
def signalled(tmp_path_factory, whole) -> dict[str, tuple[Path, list[tuple[int, str, str, float]]]]:
    """Each signal row's run folder and, per process, (exit code, stdout, stderr, seconds after its signal).

    After `whole`: its pair compiles the programs these eight processes then load from the compile cache."""
    folder, results = once_per_run(tmp_path_factory, "signalled", run_signalled)
    return {name: (folder / name, results[name]) for name in SIGNALS}


def run_signalled(folder: Path) -> dict[str, list[tuple[int, str, str, float]]]:
    """The four rows at once, a pair of processes each: each pair mostly waits, for its peer and its epochs."""
    argvs = [pair_argv(port, rank, folder / name, "--dataset", "digits", "--epochs", str(EPOCHS))
             for name, port in [(name, free_port()) for name in SIGNALS] for rank in (0, 1)]
    with processes(*argvs) as procs:
        pairs = {name: procs[2 * i:2 * i + 2] for i, name in enumerate(SIGNALS)}
        sent = {}
        for name, (targets, signum) in SIGNALS.items():
            wait_for_epoch(pairs[name][0], 1)
            sent[name] = time.monotonic()
            for rank in targets:
                pairs[name][rank].send_signal(signum)
        return {name: finish(pairs[name], sent[name], TIMEOUT_S * 3) for name in SIGNALS}


def stopped_at_one_epoch(run: Path, results: list[tuple[int, str, str, float]]) -> int:
    """Every process exited 143 at the same epoch, which the run's checkpoint holds, and said how to resume."""
    stopped = []
    for code, out, err, _ in results:
        assert code == 143 and "Traceback" not in err, err[-2000:]
        assert f"continue with: jaxintro train --resume {run}" in out
        stopped.append(summary(out)["epochs"])
    assert stopped[0] == stopped[1] < EPOCHS  # one epoch boundary for all
    assert load_run(run).epoch == stopped[0]  # one consistent checkpoint
    return stopped[0]


# Whoever got the signal, the stop leaves the same kind of checkpoint, checked in every row; resuming from it is
# one code path, run once (in the row that signals both).
@pytest.mark.parametrize("row", ["sigterm-0", "sigterm-1", "sigterm-both"])
def test_sigterm_to_any_process_stops_all_at_one_epoch_and_resumes_to_the_same_result(signalled, uninterrupted, row):
    run, results = signalled[row]
    stopped = stopped_at_one_epoch(run, results)
    TIMES.append((f"SIGTERM to process {' and '.join(map(str, SIGNALS[row][0]))}",
                  ", ".join(f"{t:.1f} s (exit {c})" for c, _, _, t in results)))
    if row != "sigterm-both":
        return
    port = free_port()
    with processes(*[["--resume", str(run), *pair_argv(port, rank, run)[:6], "--json"]
                     for rank in (0, 1)]) as procs:
        resumed = finish(procs, time.monotonic(), 600)
    for code, out, err, _ in resumed:
        assert code == 0, err[-2000:]
        assert f"from epoch {stopped} to {EPOCHS}" in out
        assert summary(out)["final_loss"] == uninterrupted["final_loss"]
        assert summary(out)["test_accuracy"] == uninterrupted["test_accuracy"]


def test_ctrl_c_in_one_process_stops_every_process_after_one_common_epoch(signalled):
    # Ctrl-C in the terminal of process 1 only: it becomes a preemption notice that every process agrees on.
    run, results = signalled["ctrl-c-in-1"]
    stopped_at_one_epoch(run, results)
    assert "Ctrl-C: asking every process to stop after a common epoch" in results[1][2]
    TIMES.append(("Ctrl-C in process 1", ", ".join(f"{t:.1f} s (exit {c})" for c, _, _, t in results)))


def test_a_dead_or_stalled_peer_ends_the_others_within_the_heartbeat_bound(tmp_path):
    # Three pairs at once, one fault each: a peer dies, the coordinator dies, a peer stalls. After its fault a
    # survivor only waits (on a failed collective or a heartbeat), so the rows share the wait, not the cores.
    rows = [("SIGKILL", 1), ("SIGKILL", 0), ("SIGSTOP", 1)]
    ports: set[int] = set()
    while len(ports) < len(rows):  # three distinct ports, each free when chosen
        ports.add(free_port())
    with contextlib.ExitStack() as stack:
        pairs = []
        for i, port in enumerate(sorted(ports)):
            run = tmp_path / f"r{i}"
            argvs = [pair_argv(port, rank, run, "--dataset", "digits", "--epochs", "100000") for rank in (0, 1)]
            pairs.append((run, stack.enter_context(processes(*argvs))))
        for _, procs in pairs:
            # Saves are asynchronous and each waits for the one before: by epoch 3's line, epoch 1's is on disk.
            wait_for_epoch(procs[0], 3)
        sent = time.monotonic()
        for (fault, victim), (_, procs) in zip(rows, pairs):
            procs[victim].send_signal(getattr(signal, fault))
        survivors = [procs[1 - victim] for (_, victim), (_, procs) in zip(rows, pairs)]
        with concurrent.futures.ThreadPoolExecutor(len(rows)) as pool:  # each survivor's own exit time
            ended = list(pool.map(lambda survivor: finish([survivor], sent, TIMEOUT_S * 3)[0], survivors))
    for (fault, victim), (run, _), (code, out, err, took) in zip(rows, pairs, ended):
        # A lost peer is a failure (never 0), said in one of two ways: the collective that failed (jaxintro's
        # line, exit 1) or JAX's coordination service ending the process (exit 134 = SIGABRT) naming the
        # unhealthy task.
        assert code in (1, -signal.SIGABRT), (fault, victim, code, err[-2000:])
        said = any(words in err.lower() for words in ("lost its peers", "detected fatal errors", "unhealthy",
                                                      "heartbeat", "leader task"))
        assert said, (fault, victim, err[-2000:])
        assert took < TIMEOUT_S * 3, (fault, victim, took)
        TIMES.append((f"{fault} of process {victim}", f"survivor: {took:.1f} s (exit {code})"))
        assert load_run(run).epoch >= 1  # the checkpoints written before the fault are intact


# The runs refused before anyone trains: a wrong --num-processes on either side, and a different --run-dir per
# process. Each mostly waits for a join that never completes, so the three pairs start at once.
REFUSALS = {"peer-says-3": (2, 3), "coordinator-says-3": (3, 2), "different-run-folders": (2, 2)}


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict[str, tuple[Path, list[tuple[int, str, str, float]]]]:
    """Each refusal's folder and, per process, (exit code, stdout, stderr, seconds since the three started)."""
    folder, results = once_per_run(tmp_path_factory, "refused", run_refusals)
    return {name: (folder / name, results[name]) for name in REFUSALS}


def run_refusals(folder: Path) -> dict[str, list[tuple[int, str, str, float]]]:
    """The three refusals at once, each in a folder of its own in `folder`."""
    argvs, environs, folders = [], [], {}
    # Nobody trains here: a shorter bound (10 s) ends the wait for a third process sooner, as it would for a user.
    short = env(JAXINTRO_DISTRIBUTED_TIMEOUT=str(TIMEOUT_S // 2))
    for name, counts in REFUSALS.items():
        port, folders[name] = free_port(), folder / name
        folders[name].mkdir()
        runs = (folders[name] / "r",) * 2
        if name == "different-run-folders":  # each "host" has one of its own, as on a cluster without shared storage
            runs = (folders[name] / "host-a", folders[name] / "host-b")
            runs[1].mkdir()
        argvs += [pair_argv(port, rank, runs[rank], "--dataset", "digits", "--epochs", "2", processes=counts[rank])
                  for rank in (0, 1)]
        environs += [short, short] if name.endswith("-3") else [env(), env()]
    with processes(*argvs, environs=environs) as procs:
        results = finish(procs, time.monotonic(), TIMEOUT_S * 4)
    return {name: results[2 * i:2 * i + 2] for i, name in enumerate(REFUSALS)}


def test_different_run_folders_are_refused_by_every_process_before_training(refused):
    folder, results = refused["different-run-folders"]
    for code, out, err, _ in results:
        assert code == 2, err[-2000:]
        assert "is not one folder that every process sees: process(es) 1" in err and "Epoch" not in out
    assert not (folder / "host-a").exists()  # process 0's claim is withdrawn
    TIMES.append(("different --run-dir per process", ", ".join(f"{t:.1f} s (exit {c})" for c, *_, t in results)))


@pytest.mark.parametrize("counts", ["peer-says-3", "coordinator-says-3"])
def test_a_wrong_process_count_on_one_side_ends_both(refused, counts):
    _, results = refused[counts]
    for code, out, err, took in results:
        # Once joined, jaxintro compares the counts (exit 2, one line). A coordinator that waits for a third
        # process never lets the others join: JAX ends them at the join time-out (SIGABRT), or jaxintro does.
        assert code in (2, -signal.SIGABRT) and "Epoch" not in out, err[-2000:]
        assert any(words in err for words in ("disagree on --num-processes", "could not join", "did not join",
                                              "detected fatal errors")), err[-2000:]
        assert took < TIMEOUT_S * 3
    first, second = REFUSALS[counts]
    TIMES.append((f"--num-processes {first} on process 0, {second} on process 1",
                  ", ".join(f"{t:.1f} s (exit {c})" for c, *_, t in results)))


def test_a_resume_past_a_damaged_checkpoint_completes_on_every_process(whole, tmp_path):
    # Discarding the damaged newest checkpoint ends in Orbax's barrier of every process: all must take part.
    # The run no fault touched, copied (it keeps its last three checkpoints), with its newest one damaged.
    run = tmp_path / "r"
    shutil.copytree(whole[1], run)
    for path in (run / "checkpoints" / str(EPOCHS) / "state").rglob("*"):
        if path.is_file() and path.stat().st_size > 1000:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    port = free_port()
    with processes(*[["--resume", str(run), *pair_argv(port, rank, run)[:6], "--epochs", str(EPOCHS + 1),
                      "--json"] for rank in (0, 1)]) as procs:
        results = finish(procs, time.monotonic(), TIMEOUT_S * 5)
    for code, out, err, took in results:
        assert code == 0, err[-2000:]
        assert f"from epoch {EPOCHS - 1} to {EPOCHS + 1}" in out and took < TIMEOUT_S * 5
    assert load_run(run).epoch == EPOCHS + 1
    TIMES.append(("resume past a damaged newest checkpoint", ", ".join(f"{t:.1f} s (exit {c})" for c, *_, t in results)))


def test_coordinator_auto_without_a_scheduler_is_a_one_line_error(tmp_path):
    environ = {k: v for k, v in env().items()
               if not k.startswith(("SLURM_", "OMPI_")) and k not in ("JOB_COMPLETION_INDEX",)}
    proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", "train", "--coordinator", "auto", "--run-dir",
                           str(tmp_path / "r")], capture_output=True, text=True, env=environ, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "found no SLURM step" in proc.stderr and not (tmp_path / "r").exists()


FAKE_SRUN = '''#!{python}
"""srun for one node: start SLURM_NTASKS copies of the command with the variables srun sets for each task."""
import os, subprocess, sys

command = sys.argv[1:]
while command and command[0].startswith("-"):  # srun's own options
    command.pop(0)
tasks = [subprocess.Popen(command, env={{**os.environ, "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i),
                                        "SLURM_STEP_NODELIST": "127.0.0.1"}})
         for i in range(int(os.environ["SLURM_NTASKS"]))]
try:
    codes = [task.wait(timeout=600) for task in tasks]
finally:
    for task in tasks:
        task.kill()
sys.exit(next((code for code in codes if code), 0))
'''


def test_the_documented_sbatch_script_trains_under_srun(tmp_path):
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(FAKE_SRUN.format(python=sys.executable))
    fake.chmod(0o755)
    environ = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "OMPI_"))}
    environ.update(PATH=f"{fake.parent}:{environ['PATH']}", SLURM_JOB_ID="4242", SLURM_NTASKS="2",
                   JAX_COORDINATOR_PORT=str(free_port()), VENV=sys.prefix, DATASET="digits",
                   DATA_DIR=str(tmp_path / "data"), RUN_DIR=str(tmp_path / "run"), EPOCHS="1")
    # The digits, not MNIST (DATASET, as a user may set it): what is checked is how the script starts the tasks.
    script = Path(__file__).resolve().parents[1] / "docs" / "cluster" / "train.sbatch"
    proc = subprocess.run(["bash", str(script)], env=environ, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Both tasks found their place in the step (`--coordinator auto` read srun's variables) and trained one run.
    accuracies = re.findall(r"^Done: test accuracy (\S+) after 1 epoch,", proc.stdout, re.M)
    assert len(accuracies) == 2 and accuracies[0] == accuracies[1], proc.stdout[-3000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["processes"] == 2
    assert load_run(tmp_path / "run").epoch == 1


def test_the_documented_kubernetes_job_runs_as_an_indexed_job(tmp_path):
    import yaml

    manifest = Path(__file__).resolve().parents[1] / "docs" / "cluster" / "job.yaml"
    job = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc["kind"] == "Job"][0]
    assert job["spec"]["completionMode"] == "Indexed"
    container = job["spec"]["template"]["spec"]["containers"][0]
    count = int(job["spec"]["parallelism"])
    port = free_port()
    environs = []
    for index in range(count):
        environ = {k: v for k, v in env().items() if not k.startswith(("SLURM_", "OMPI_"))}
        environ.update({e["name"]: e["value"] for e in container["env"]})
        # What the cluster would give: the index from Kubernetes, pod 0 reachable, the volumes mounted.
        environ.update(JOB_COMPLETION_INDEX=str(index), JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                       RUN_DIR=str(tmp_path / "run"), DATASET="digits", DATA_DIR=str(tmp_path / "data"), EPOCHS="1",
                       PATH=f"{Path(sys.executable).parent}:{environ['PATH']}")
        environs.append(environ)
    pods = [subprocess.Popen(container["command"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for e in environs]
    try:
        results = [pod.communicate(timeout=900) for pod in pods]
    finally:
        for pod in pods:
            pod.kill()
    for pod, (out, err) in zip(pods, results):
        assert pod.returncode == 0, err[-3000:]
        assert "Done: test accuracy" in out
    assert json.loads((tmp_path / "run" / "result.json").read_text())["processes"] == count
    assert load_run(tmp_path / "run").epoch == 1
