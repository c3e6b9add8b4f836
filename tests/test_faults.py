"""The machine's faults: a full disk, a vanished run folder, a failed write, a model too big for memory.

Each row of the fault matrix (docs/reliability.md) runs the CLI in a child process and checks what
the user gets: one line on stderr, the exit code, no traceback from any thread; and what is left:
the newest committed checkpoint intact, and the run continued (`--resume`, or the same command when
nothing was kept) to exactly the uninterrupted run's final metrics. Real faults where a test can
cause them (a small tmpfs as the run folder's disk when running as root, as CI does; the folder
removed; RLIMIT_AS), the fault seam `JAXINTRO_FAIL_WRITE=N:ERRNO` for the others.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from jaxintro import checkpoint, faults, runs
from jaxintro.cli import main
from jaxintro.evaluate import load_run
from jaxintro.runs import read_metrics

# Every epoch saved (these tests count checkpoints); 3 epochs: the session's `digits_run` is the uninterrupted run.
DIGITS = ["--dataset", "digits", "--save-every", "0"]
FINAL = ("epochs", "test_accuracy", "train_accuracy", "final_loss")


def train_child(*argv: str) -> subprocess.CompletedProcess:
    """`jaxintro train ARGV` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "jaxintro.cli", "train", *argv], capture_output=True, text=True,
                          timeout=300)


def the_one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    """The child's single stderr line, after checking its exit code and that no traceback reached the terminal."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "Exception in thread" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    print(f"\n[exit {proc.returncode}] {lines[0]}")  # `pytest tests/test_faults.py -s` shows the matrix's outcomes
    return lines[0]


def final(run: Path) -> dict:
    """The final metrics of a run, from its result.json."""
    result = json.loads((run / "result.json").read_text())
    return {key: result[key] for key in FINAL}


def committed(run: Path) -> list[int]:
    """The checkpoints Orbax finished in `run`."""
    return sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())


def assert_safe_and_resumable(run: Path, epoch: int, whole: Path, flags: list[str] | None = None) -> None:
    """Epoch `epoch` is the newest committed checkpoint, it restores, metrics are not ahead, and --resume ends as `whole`."""
    assert committed(run)[-1] == epoch
    assert checkpoint.read_meta(run)["epoch"] == epoch and load_run(run).epoch == epoch
    metrics = read_metrics(run)
    assert not metrics or metrics[-1]["epoch"] <= epoch  # never ahead of the checkpoints
    assert main(["train", "--resume", str(run), *(flags or [])]) == 0
    assert final(run) == final(whole)
    assert not list((run / "checkpoints").glob("*.orbax-checkpoint-tmp*"))  # a failed save's debris is gone


# The seam, SQLite-style: every write of a 3-epoch run fails in turn. In this process (JAX already
# started, so each row takes a second): the seam's faults are raised where the write is made, in the
# main thread; the faults of Orbax's own threads are real ones, in child processes, below.
SEAM_ROWS = [  # the Nth write, its errno, what it writes, the epoch on disk afterwards (None: nothing kept)
    (1, "ENOSPC", "the claim of the run folder", None),
    (2, "EROFS", "config.json", None),
    (3, "EIO", "checkpoint 1", None),
    (4, "ENOSPC", "metrics.jsonl", 1),
    (5, "EROFS", "checkpoint 2", 1),
    (6, "EIO", "metrics.jsonl", 2),
    (7, "ENOSPC", "checkpoint 3", 2),
    (8, "EROFS", "metrics.jsonl", 3),
    (9, "EIO", "curves.png", 3),
    (10, "ENOSPC", "result.json", 3),
]


@pytest.mark.parametrize("n, name, what, on_disk", SEAM_ROWS, ids=[f"{r[0]}-{r[2]}-{r[1]}" for r in SEAM_ROWS])
def test_every_write_can_fail_with_one_line_and_lose_nothing(n, name, what, on_disk, tmp_path, digits_run, capsys,
                                                             monkeypatch):
    run = tmp_path / "r"
    monkeypatch.setenv(faults.FAIL_WRITE_ENV, f"{n}:{name}")
    monkeypatch.setattr(faults, "_writes", 0)
    code = main(["train", *DIGITS, "--epochs", "3", "--run-dir", str(run)])
    out, err = capsys.readouterr()
    line = the_one_line(subprocess.CompletedProcess([], code, out, err), faults.EXIT_WRITE_FAULT)
    reason = os.strerror(getattr(errno, name))
    assert line.startswith(f"jaxintro train: write failed: could not write {what} in {run}: {reason} [{name}]")
    assert "Done" not in out
    monkeypatch.delenv(faults.FAIL_WRITE_ENV)
    if on_disk is None:  # a failed start: nothing kept, and the same command then trains the whole run
        assert "run the same command again" in line and not (run / "checkpoints").exists()
        assert main(["train", *DIGITS, "--epochs", "3", "--run-dir", str(run)]) == 0
        assert final(run) == final(digits_run)
    else:
        assert f"epoch {on_disk} is safely on disk" in line and f"jaxintro train --resume {run}" in line
        assert_safe_and_resumable(run, on_disk, digits_run)


def test_a_save_that_failed_between_processes_is_told_from_a_refused_write(tmp_path):
    """Orbax's barrier failing (a peer gone) is told by its words: a multi-process run then reports its lost peer
    (test_cluster.py), not a write the disk refused."""
    faults.watch(tmp_path)  # this run's folder, and a fresh errors.log
    peer = faults.fault_from(ValueError("UNKNOWN: Gloo AllGather failed: [pair.cc:538] Read error "
                                        "[127.0.0.1]:23971: Connection reset by peer"), "checkpoint 3", tmp_path)
    full = faults.fault_from(ValueError("INTERNAL: Error writing local file: os_error_code=28"), "checkpoint 3",
                             tmp_path)
    assert peer.between_processes() and full.reason == "No space left on device [ENOSPC]"
    assert not full.between_processes() and not faults.fault_from(OSError(errno.EIO, "I/O error"), "metrics.jsonl",
                                                                  tmp_path).between_processes()
    (tmp_path / "elsewhere").mkdir()
    gone = faults.fault_from(ValueError("UNKNOWN: Barrier failed"), "checkpoint 3", tmp_path / "elsewhere" / "r")
    assert gone.vanished and not gone.between_processes()
    # A refusal whose errno the message does not name is still the disk's, not a lost peer.
    denied = faults.fault_from(ValueError("PERMISSION_DENIED: Error opening file"), "checkpoint 3", tmp_path)
    assert denied.reason == "PERMISSION_DENIED: Error opening file" and not denied.between_processes()


def test_lost_peers_name_the_newest_checkpoint_on_disk(tmp_path):
    """The line of a run that lost its peers names the newest committed checkpoint, not the epoch whose save the
    failure interrupted (a step Orbax had not finished has no number of its own yet)."""
    for step in ("1", "2", "3.orbax-checkpoint-tmp-7"):
        (tmp_path / "checkpoints" / step).mkdir(parents=True)
    leave = ("import sys; from pathlib import Path; from jaxintro.commands.train import leave_for_lost_peers; "
             "leave_for_lost_peers(ValueError('UNKNOWN: Gloo AllGather failed'), Path(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", leave, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip() == (f"jaxintro train: error: process 0 lost its peers (ValueError: UNKNOWN: Gloo "
                                   f"AllGather failed); resume from epoch 2 with --resume {tmp_path}")


def test_lost_peers_after_an_epoch_whose_checkpoint_was_never_committed_say_so(tmp_path, monkeypatch, capsys):
    """A peer died while checkpoint 1 was being written: one epoch trained, none committed, and the line says that
    (it once said "no epoch finished")."""
    from jaxintro.commands import train as train_command

    def exit_(code: int) -> None:
        raise SystemExit(code)

    (tmp_path / "checkpoints" / "1.orbax-checkpoint-tmp-7").mkdir(parents=True)
    monkeypatch.setattr(train_command.os, "_exit", exit_)
    lost = "jaxintro train: error: process 0 lost its peers (ValueError: UNKNOWN: Gloo AllGather failed); "
    for trained, said in ((1, "1 epoch trained, but its checkpoint was never committed: nothing to resume, start the "
                              "run again"), (0, "no epoch finished")):
        with pytest.raises(SystemExit):
            train_command.leave_for_lost_peers(ValueError("UNKNOWN: Gloo AllGather failed"), tmp_path, trained=trained)
        assert capsys.readouterr().err.strip() == lost + said


def test_a_write_fault_ends_the_process_though_a_library_thread_still_waits(tmp_path):
    """After its one line `jaxintro` exits at once: a writer thread stuck on the refusing disk cannot hold it up."""
    stuck = ("import threading; threading.Thread(target=threading.Event().wait).start(); "
             "from jaxintro.cli import run; run()")
    run = tmp_path / "r"
    proc = subprocess.run([sys.executable, "-c", stuck, "train", *DIGITS, "--epochs", "3", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, faults.FAIL_WRITE_ENV: "4:ENOSPC"})
    line = the_one_line(proc, faults.EXIT_WRITE_FAULT)
    assert f"could not write metrics.jsonl in {run}" in line and "epoch 1 is safely on disk" in line


# ---------------------------------------------------------------- real faults


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `folder` (root only: skipped elsewhere), unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def resize(folder: Path, size: str) -> None:
    """Free space on the tmpfs at `folder`, as a user would after a full disk."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


@pytest.mark.parametrize("size, on_disk", [("1100k", 1), ("600k", None)], ids=["mid-run", "at-the-first-save"])
def test_a_full_disk_is_one_line_and_loses_nothing(size, on_disk, tmp_path, digits_run):
    """Orbax's background save meets ENOSPC: one line, no thread's traceback, and metrics never ahead of it."""
    with tmpfs(tmp_path / "disk", size) as disk:
        run = disk / "r"
        proc = train_child(*DIGITS, "--epochs", "3", "--run-dir", str(run))
        line = the_one_line(proc, faults.EXIT_WRITE_FAULT)
        assert f"in {run}: No space left on device [ENOSPC]" in line and "Done" not in proc.stdout
        resize(disk, "20m")
        if on_disk is None:
            assert "run the same command again" in line and not (run / "checkpoints").exists()
            assert main(["train", *DIGITS, "--epochs", "3", "--run-dir", str(run)]) == 0
            assert final(run) == final(digits_run)
        else:
            # Which save meets the full disk first depends on how far Orbax's background writes got (1100k holds
            # about one checkpoint): the line must name it, and the epoch before it is the one kept.
            safe = int(re.search(r"epoch (\d+) is safely", line)[1])
            assert safe >= on_disk and f"could not write checkpoint {safe + 1}" in line
            # The log of the failure, when the full disk still took it; never a half-written one.
            log = run / "errors.log"
            assert log.exists() == (f"(details in {log})" in line)
            assert not log.exists() or "No space left" in log.read_text()
            assert_safe_and_resumable(run, safe, digits_run)


def test_errors_log_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """The kept records go to errors.log; a write that fails part-way leaves the log as it was."""
    faults.watch(tmp_path)
    faults.keep("the first failure")
    assert runs.write_log(tmp_path) == tmp_path / "errors.log"
    assert (tmp_path / "errors.log").read_text() == "the first failure\n"
    real_open = open

    def fills_the_disk(path, *args, **kwargs):
        """A file whose first block reaches the disk before the disk is full."""
        out = real_open(path, *args, **kwargs)
        out.write("half a rec")
        out.flush()
        out.write = lambda text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
        return out

    monkeypatch.setattr("builtins.open", fills_the_disk)
    faults.keep("the second failure")
    assert runs.write_log(tmp_path) is None
    (tmp_path / "new").mkdir()
    assert runs.write_log(tmp_path / "new") is None
    monkeypatch.undo()
    assert (tmp_path / "errors.log").read_text() == "the first failure\n"  # put back as it was
    assert not (tmp_path / "new" / "errors.log").exists()  # a new log is removed


def stop_at_epoch(proc: subprocess.Popen, epoch: int) -> None:
    """Freeze the child once it printed `epoch`'s line (SIGSTOP: what follows happens between two of its steps)."""
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("Epoch") and int(line.split("|")[0].split()[1]) >= epoch:
            freeze(proc)
            return
    raise AssertionError(f"training ended before epoch {epoch}: {proc.stderr.read()}")  # type: ignore[union-attr]


def freeze(proc: subprocess.Popen) -> None:
    """SIGSTOP the child and wait until every thread is stopped (the signal is delivered asynchronously)."""
    proc.send_signal(signal.SIGSTOP)
    for _ in range(1000):
        if Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
            return
        time.sleep(0.01)
    raise AssertionError("the training process did not stop")


def remount_read_only(disk: Path, proc: subprocess.Popen) -> None:
    """Remount `disk` read-only under the frozen child.

    The kernel refuses (EBUSY) while a file on it is open for writing, as during one of Orbax's saves: then let
    the child run a moment and try again, a bounded number of times."""
    for _ in range(200):
        if subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True).returncode == 0:
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
        freeze(proc)
    open_files = [str(fd.readlink()) for fd in Path(f"/proc/{proc.pid}/fd").iterdir()]
    raise AssertionError(f"{disk} stayed busy at every try; the child's open files: {open_files}")


def test_a_run_folder_removed_during_training_stops_the_run_with_one_line(tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "train", *DIGITS, "--epochs", "400", "--run-dir",
                             str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        stop_at_epoch(proc, 2)
        shutil.rmtree(run)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    line = the_one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), faults.EXIT_WRITE_FAULT)
    assert f"in {run}: the run folder was removed while the run was writing to it" in line
    assert "start it again" in line and "Done" not in out


def test_a_run_folder_turned_read_only_stops_the_run_with_one_line(tmp_path):
    """The disk remounted read-only while the process is stopped: Orbax's thread meets EROFS first."""
    with tmpfs(tmp_path / "disk", "20m") as disk:
        run = disk / "r"
        proc = subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "train", *DIGITS, "--epochs", "400",
                                 "--run-dir", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            stop_at_epoch(proc, 3)  # by epoch 3's line, checkpoint 1 is committed (epoch 2's save waited for it)
            remount_read_only(disk, proc)
            proc.send_signal(signal.SIGCONT)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
            proc.wait()
        line = the_one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                            faults.EXIT_WRITE_FAULT)
        assert f"in {run}: Read-only file system [EROFS]; epoch " in line and "Done" not in out
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        epoch = committed(run)[-1]
        assert f"epoch {epoch} is safely on disk" in line
        # The uninterrupted run to one epoch past the stop (a constant learning rate: the same first epochs).
        assert main(["train", *DIGITS, "--epochs", str(epoch + 1), "--run-dir", str(tmp_path / "whole")]) == 0
        assert_safe_and_resumable(run, epoch, tmp_path / "whole", ["--epochs", str(epoch + 1)])


def test_a_model_too_big_for_memory_is_refused_before_anything_is_allocated(tmp_path):
    """`--hidden 60000,60000`: 3.6 billion parameters. Under an address-space limit an allocation would fail at once
    instead of growing until the kernel kills the process, so the test is safe even without the refusal."""
    run = tmp_path / "r"
    # `ulimit -v` in a shell that then becomes the child: no fork of this (multithreaded, JAX-running) process.
    argv = [sys.executable, "-m", "jaxintro.cli", "train", *DIGITS, "--hidden", "60000,60000", "--run-dir", str(run)]
    proc = subprocess.run(["sh", "-c", f"ulimit -v {8 << 20} && exec " + shlex.join(argv)], capture_output=True,
                          text=True, timeout=300)
    line = the_one_line(proc, 2)
    assert "this model needs about 81.6 GiB" in line and "3,604,560,010 parameters" in line
    assert "GiB available; use narrower layers (--hidden) or a smaller --batch-size" in line
    assert not run.exists()


def test_a_half_written_step_is_removed_once_a_later_save_succeeds(tiny, tmp_path):
    """What a failed save left (`N.orbax-checkpoint-tmp...`, which a restore passes over) goes once a save succeeds."""
    from jaxintro.config import TrainConfig
    from jaxintro.train import Trainer

    config = TrainConfig(dataset="digits", epochs=1)
    state = Trainer.create(config, tiny).init_state()
    partial = tmp_path / "checkpoints" / "5.orbax-checkpoint-tmp-1234567"
    (partial / "state").mkdir(parents=True)
    saver = checkpoint.Checkpointer(tmp_path)
    saver.save(state._replace(epoch=1), config, [{"epoch": 1}])
    saver.close()
    assert committed(tmp_path) == [1] and not partial.exists()


# ---------------------------------------------------------------- what errors.log keeps, in this process


@pytest.fixture
def kept(fault_state) -> list[str]:
    """The records errors.log would hold, empty at the start and put back after the test (`fault_state`'s)."""
    return fault_state.records


def test_library_records_are_kept_formatted_up_to_the_limit(kept, monkeypatch):
    monkeypatch.setattr(faults, "MAX_RECORDS", 2)
    handler = faults._Keeper()  # noqa: SLF001 (what capture_library_logs installs on absl's and asyncio's loggers)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    for n in range(3):
        handler.emit(logging.LogRecord("absl", logging.ERROR, __file__, 1, "write %d failed", (n,), None))
    assert kept == ["ERROR:absl:write 0 failed", "ERROR:absl:write 1 failed"]


def unraisable(message: str) -> SimpleNamespace:
    """What Python hands `sys.unraisablehook`: an exception nothing could raise, with its traceback."""
    try:
        raise OSError(message)
    except OSError as exc:
        return SimpleNamespace(exc_type=OSError, exc_value=exc, exc_traceback=exc.__traceback__, object=None)


def test_an_exception_from_a_library_thread_is_kept_with_its_traceback(kept, monkeypatch):
    shown = []
    monkeypatch.setattr(sys, "__unraisablehook__", shown.append)
    error = unraisable("TensorStore: the folder is gone")
    thread = threading.Thread(target=faults._keep_unraisable, args=(error,))  # noqa: SLF001
    thread.start()
    thread.join(timeout=10)
    assert shown == [] and kept == ["".join(traceback.format_exception(OSError, error.exc_value,
                                                                        error.exc_value.__traceback__))]
    assert kept[0].startswith("Traceback (most recent call last):") and kept[0].endswith(
        "OSError: TensorStore: the folder is gone\n")


def test_an_exception_nothing_could_raise_in_the_main_thread_is_shown_as_python_shows_it(kept, monkeypatch):
    shown = []
    monkeypatch.setattr(sys, "__unraisablehook__", shown.append)
    error = unraisable("not a library thread's")
    faults._keep_unraisable(error)  # noqa: SLF001
    assert shown == [error] and kept == []


def test_library_logs_and_thread_exceptions_go_to_the_kept_records(kept, monkeypatch):
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # put back after the test
    loggers = {name: logging.getLogger(name) for name in ("absl", "asyncio")}
    for logger in loggers.values():  # as they were, put back after the test
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "propagate", True)
        monkeypatch.setattr(logger, "level", logging.NOTSET)
    faults.capture_library_logs()
    faults.capture_library_logs()  # a second run in the same process adds no second handler
    assert sys.unraisablehook is faults._keep_unraisable  # noqa: SLF001
    assert loggers["absl"].level == logging.ERROR and loggers["asyncio"].level == logging.NOTSET
    for logger in loggers.values():
        assert len(logger.handlers) == 1 and isinstance(logger.handlers[0], faults._Keeper)  # noqa: SLF001
        assert not logger.propagate  # nothing printed under the one line that says what failed
    loggers["absl"].warning("saved step 3")  # Orbax's chatter: below ERROR, not kept
    loggers["absl"].error("write of step 3 failed")
    loggers["asyncio"].error("Task exception was never retrieved")
    assert kept == ["ERROR:absl:write of step 3 failed", "ERROR:asyncio:Task exception was never retrieved"]


# ---------------------------------------------------------------- each function of faults.py, in this process
# The fault matrix above runs its trainings in child processes, which import faults.py unmutated: under `make
# mutation` only a test that calls the function in this process can catch a mutant of it. These pin each function
# exactly (whole messages, return values, the bytes written), without training anything.

GONE = "the run folder was removed while the run was writing to it"


@pytest.fixture
def fault_state(monkeypatch) -> SimpleNamespace:
    """faults.py's globals, fresh for the test and put back after it: no seam, no write counted, no folder watched."""
    state = SimpleNamespace(records=[], identity={}, written={})
    monkeypatch.setattr(faults, "_records", state.records)
    monkeypatch.setattr(faults, "_identity", state.identity)
    monkeypatch.setattr(faults, "_written", state.written)
    monkeypatch.setattr(faults, "_writes", 0)
    monkeypatch.delenv("JAXINTRO_FAIL_WRITE", raising=False)
    return state


def test_a_write_fault_says_what_failed_and_why(tmp_path):
    """Its message is `what: reason`; it keeps each part, and is not a vanished folder unless told."""
    fault = faults.WriteFault("metrics.jsonl", tmp_path, "Input/output error [EIO]")
    assert str(fault) == "metrics.jsonl: Input/output error [EIO]"
    assert (fault.what, fault.run_dir, fault.reason, fault.vanished) == ("metrics.jsonl", tmp_path,
                                                                          "Input/output error [EIO]", False)
    assert isinstance(fault, faults.JaxintroError)  # so the CLI's one-line handling applies to it
    gone = faults.WriteFault("checkpoint 2", tmp_path, GONE, vanished=True)
    assert str(gone) == f"checkpoint 2: {GONE}" and gone.vanished is True


@pytest.mark.parametrize("reason, between", [
    ("UNKNOWN: Gloo AllGather failed: [pair.cc:538] Connection reset by peer", True),
    ("DEADLINE_EXCEEDED: Barrier timed out", True),
    ("UNAVAILABLE: the Coordination Service is gone", True),
    ("all-gather of step 3 failed", True),
    ("ALLGATHER failed", True),
    ("No space left on device [ENOSPC]", False),
    ("PERMISSION_DENIED: Error opening file", False),
])
def test_only_a_failed_exchange_between_processes_is_told_as_one(reason: str, between: bool, tmp_path):
    assert faults.WriteFault("checkpoint 3", tmp_path, reason).between_processes() is between


@pytest.mark.parametrize("code, said", [
    (errno.ENOSPC, "No space left on device [ENOSPC]"),
    (errno.EROFS, "Read-only file system [EROFS]"),
    (errno.EIO, "Input/output error [EIO]"),
    (errno.EDQUOT, "Disk quota exceeded [EDQUOT]"),
    (99999, "unknown error"),  # no such errno: not "Unknown error 99999 [...]", which has no name to give
    (0, "unknown error"),
    (None, "unknown error"),
], ids=["ENOSPC", "EROFS", "EIO", "EDQUOT", "99999", "0", "None"])
def test_an_errno_is_said_as_the_os_says_it_with_its_name(code: int | None, said: str):
    assert faults.os_reason(code) == said


def test_an_errno_the_os_has_no_name_for_is_said_by_the_fallback_when_there_is_one():
    assert faults.os_reason(None, "INTERNAL: the library's words") == "INTERNAL: the library's words"
    assert faults.os_reason(99999, "the library's words") == "the library's words"
    assert faults.os_reason(errno.EIO, "the library's words") == "Input/output error [EIO]"  # a known errno wins
    assert faults.os_reason(None, "") == "unknown error"


@pytest.mark.parametrize("exc, code", [
    (OSError(errno.EACCES, "Permission denied"), errno.EACCES),  # its own errno, which no text below would find
    (OSError(errno.ENOSPC, "whatever the words"), errno.ENOSPC),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "x"), errno.ENOENT),
    (OSError("INTERNAL: os_error_code=28"), errno.ENOSPC),  # an OSError without an errno: its message's
    (ValueError("INTERNAL: Error writing local file: os_error_code='30' [source locations]"), errno.EROFS),
    (ValueError("os_error_code=5, then os_error_code=28"), errno.EIO),  # the first one named
    (ValueError("INTERNAL: No space left on device"), errno.ENOSPC),
    (ValueError("Read-only file system"), errno.EROFS),
    (ValueError("Input/output error"), errno.EIO),
    (ValueError("No such file or directory"), errno.ENOENT),
    (ValueError("Disk quota exceeded"), errno.EDQUOT),
    (ValueError("PERMISSION_DENIED: Error opening file"), None),
    (OSError("no errno at all"), None),
    (ValueError(""), None),
], ids=["errno-EACCES", "errno-ENOSPC", "FileNotFoundError", "oserror-code-28", "code-30", "first-code",
        "text-ENOSPC", "text-EROFS", "text-EIO", "text-ENOENT", "text-EDQUOT", "none", "oserror-none", "empty"])
def test_the_errno_behind_an_error_is_its_own_or_the_one_its_message_names(exc: BaseException, code: int | None):
    assert faults.errno_in(exc) == code


def test_a_library_error_naming_an_errno_is_the_fault_of_that_errno_and_kept_for_the_log(fault_state, tmp_path):
    said = "INTERNAL: Error writing local file: os_error_code=28"
    fault = faults.fault_from(ValueError(said), "checkpoint 3", tmp_path)
    assert (fault.what, fault.run_dir, fault.reason, fault.vanished) == ("checkpoint 3", tmp_path,
                                                                          "No space left on device [ENOSPC]", False)
    assert str(fault) == "checkpoint 3: No space left on device [ENOSPC]"
    # Never raised, so without a traceback: the record is what failed, then the exception as Python prints it.
    assert fault_state.records == [f"checkpoint 3: ValueError: {said}\nValueError: {said}\n"]


def test_a_raised_error_is_kept_with_its_traceback(fault_state, tmp_path):
    try:
        raise OSError(errno.EIO, "Input/output error")
    except OSError as exc:
        fault = faults.fault_from(exc, "metrics.jsonl", tmp_path)
    assert fault.reason == "Input/output error [EIO]"
    head = "metrics.jsonl: OSError: [Errno 5] Input/output error\nTraceback (most recent call last):\n"
    assert len(fault_state.records) == 1 and fault_state.records[0].startswith(head)
    assert fault_state.records[0].endswith("\nOSError: [Errno 5] Input/output error\n")


@pytest.mark.parametrize("message, reason", [
    ("\n  \nPERMISSION_DENIED: Error opening file\nsecond line", "PERMISSION_DENIED: Error opening file"),
    ("x" * 300, "x" * 200),  # a library's message can be a page long: the line stays one line
    ("", "ValueError"),
    (" \n\t\n", "ValueError"),  # blank lines only: no words to give but the error's name
], ids=["first-non-blank-line", "cut-at-200", "empty", "blank"])
def test_an_error_naming_no_errno_is_said_by_its_first_line(message: str, reason: str, fault_state, tmp_path):
    fault = faults.fault_from(ValueError(message), "config.json", tmp_path)
    assert fault.reason == reason and not fault.vanished


def test_a_fault_in_a_folder_gone_or_replaced_is_the_folder_s_removal(fault_state, tmp_path):
    gone = faults.fault_from(OSError(errno.ENOENT, "No such file or directory"), "metrics.jsonl", tmp_path / "r")
    assert (str(gone), gone.run_dir, gone.reason, gone.vanished) == (f"metrics.jsonl: {GONE}", tmp_path / "r", GONE,
                                                                      True)
    fault_state.identity[tmp_path] = (0, 0)  # watched as another folder: this one was made in its place
    replaced = faults.fault_from(ValueError("INTERNAL: os_error_code=28"), "checkpoint 2", tmp_path)
    assert (replaced.what, replaced.reason, replaced.vanished) == ("checkpoint 2", GONE, True)
    assert len(fault_state.records) == 2  # what the library said is kept all the same


def test_a_write_the_os_refuses_becomes_a_write_fault_in_the_os_s_words(fault_state, tmp_path):
    with pytest.raises(faults.WriteFault) as raised:
        with faults.run_write("result.json", tmp_path):
            raise OSError(errno.EROFS, "Read-only file system")
    assert str(raised.value) == "result.json: Read-only file system [EROFS]" and not raised.value.vanished
    assert raised.value.__suppress_context__  # `from None`: the OSError's traceback is in errors.log, not on screen
    assert faults._writes == 1  # noqa: SLF001


def test_a_name_already_taken_is_the_caller_s_answer_not_a_write_fault(fault_state, tmp_path):
    with pytest.raises(FileExistsError):
        with faults.run_write("the claim of the run folder", tmp_path):
            raise FileExistsError(errno.EEXIST, "File exists")
    assert fault_state.records == []


def test_a_write_into_a_vanished_folder_is_refused_before_it_starts(fault_state, tmp_path):
    ran = []
    with pytest.raises(faults.WriteFault) as raised:
        with faults.run_write("curves.png", tmp_path / "gone"):
            ran.append(True)
    assert ran == [] and faults._writes == 0  # noqa: SLF001 (not counted: the seam never saw it)
    assert (str(raised.value), raised.value.vanished) == (f"curves.png: {GONE}", True)


def test_only_a_config_json_written_whole_becomes_what_the_folder_must_hold(fault_state, tmp_path):
    with faults.run_write("metrics.jsonl", tmp_path):
        pass
    assert fault_state.written == {}
    with pytest.raises(faults.WriteFault):
        with faults.run_write("config.json", tmp_path):
            raise OSError(errno.EIO, "Input/output error")
    assert fault_state.written == {}  # a config.json that failed is nothing the folder must hold
    with faults.run_write("config.json", tmp_path):
        (tmp_path / "config.json").write_text("{}")
    assert fault_state.written == {tmp_path: "config.json"} and faults._writes == 3  # noqa: SLF001


def test_the_seam_fails_only_the_nth_write_with_its_errno(fault_state, monkeypatch):
    monkeypatch.setenv("JAXINTRO_FAIL_WRITE", "3:EROFS")
    faults.inject()
    faults.inject()
    with pytest.raises(OSError) as raised:
        faults.inject()
    assert (type(raised.value), raised.value.errno, raised.value.strerror) == (OSError, errno.EROFS,
                                                                               "Read-only file system")
    faults.inject()  # the 4th passes: the seam fails one write, not every one after it
    assert faults._writes == 4  # noqa: SLF001


def test_without_the_seam_writes_are_only_counted(fault_state, monkeypatch):
    for _ in range(3):
        faults.inject()
    monkeypatch.setenv("JAXINTRO_FAIL_WRITE", "")  # set but empty: no seam either
    faults.inject()
    assert faults._writes == 4  # noqa: SLF001


@pytest.mark.parametrize("value", ["x:ENOSPC", "3:NOSUCH", "3", "3:", ":ENOSPC", "-1:EIO", "3:errorcode"])
def test_a_seam_not_of_the_form_n_errno_is_refused_with_its_value(value: str, fault_state, monkeypatch):
    monkeypatch.setenv("JAXINTRO_FAIL_WRITE", value)
    with pytest.raises(faults.ConfigError) as raised:
        faults.inject()
    assert str(raised.value) == f"JAXINTRO_FAIL_WRITE must be N:ERRNO, like 3:ENOSPC; got {value!r}"


def test_a_watched_folder_is_unchanged_while_it_is_the_one_watched(fault_state, tmp_path):
    faults.watch(tmp_path)
    stat = os.stat(tmp_path)
    assert fault_state.identity == {tmp_path: (stat.st_dev, stat.st_ino)}
    assert faults.folder_changed(tmp_path) is False
    faults.check_folder("metrics.jsonl", tmp_path)  # raises nothing


def test_an_unwatched_folder_is_changed_only_once_gone(fault_state, tmp_path):
    assert faults.folder_changed(tmp_path) is False  # nothing to compare it with
    assert faults.folder_changed(tmp_path / "gone") is True
    with pytest.raises(faults.WriteFault) as raised:
        faults.check_folder("config.json", tmp_path / "gone")
    assert (str(raised.value), raised.value.run_dir, raised.value.vanished) == (f"config.json: {GONE}",
                                                                                 tmp_path / "gone", True)


@pytest.mark.parametrize("device, inode", [(0, 1), (1, 0)], ids=["other-inode", "other-device"])
def test_a_folder_of_another_identity_than_the_watched_one_is_changed(device: int, inode: int, fault_state,
                                                                      tmp_path):
    faults.watch(tmp_path)
    dev, ino = fault_state.identity[tmp_path]
    fault_state.identity[tmp_path] = (dev + device, ino + inode)  # as if deleted and made anew elsewhere on disk
    assert faults.folder_changed(tmp_path) is True
    with pytest.raises(faults.WriteFault) as raised:
        faults.check_folder("checkpoint 2", tmp_path)
    assert (str(raised.value), raised.value.vanished) == (f"checkpoint 2: {GONE}", True)


def test_a_watched_folder_that_lost_its_config_json_is_changed_though_its_inode_is_the_same(fault_state, tmp_path):
    """A folder deleted and made anew can get the old inode number back: the config.json the run wrote tells."""
    faults.watch(tmp_path)
    with faults.run_write("config.json", tmp_path):
        (tmp_path / "config.json").write_text("{}")
    assert faults.folder_changed(tmp_path) is False
    (tmp_path / "config.json").unlink()  # the same inode, without what the run wrote there
    assert faults.folder_changed(tmp_path) is True
    with pytest.raises(faults.WriteFault) as raised:
        faults.check_folder("checkpoint 2", tmp_path)
    assert (str(raised.value), raised.value.vanished) == (f"checkpoint 2: {GONE}", True)


def test_watching_a_folder_takes_it_anew_and_forgets_an_earlier_run_s_records(fault_state, tmp_path):
    fault_state.identity[tmp_path] = (0, 0)  # an earlier run's, in this process
    fault_state.written[tmp_path] = "config.json"
    fault_state.records.append("an earlier run's failure")
    faults.watch(tmp_path)
    stat = os.stat(tmp_path)
    assert fault_state.identity == {tmp_path: (stat.st_dev, stat.st_ino)}
    assert fault_state.written == {} and fault_state.records == []
    assert faults.folder_changed(tmp_path) is False


def test_a_relative_run_folder_is_watched_by_its_absolute_path(fault_state, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = Path("r")
    run.mkdir()
    faults.watch(run)
    assert list(fault_state.identity) == [tmp_path / "r"]
    with faults.run_write("config.json", run):
        (run / "config.json").write_text("{}")
    assert fault_state.written == {tmp_path / "r": "config.json"} and faults.folder_changed(run) is False
    (run / "config.json").unlink()
    assert faults.folder_changed(run) is True


def test_a_missing_folder_cannot_be_watched(fault_state, tmp_path):
    with pytest.raises(FileNotFoundError):
        faults.watch(tmp_path / "gone")
    assert fault_state.identity == {}


def test_committed_epochs_are_the_numbered_steps_in_numeric_order(tmp_path):
    for name in ("10", "2", "1", "3.orbax-checkpoint-tmp-7", "latest", "x1"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    assert runs.committed_epochs(tmp_path) == [1, 2, 10]


def test_a_run_without_a_checkpoints_folder_has_no_committed_epoch(tmp_path):
    assert runs.committed_epochs(tmp_path) == []
    assert runs.committed_epochs(tmp_path / "gone") == []
    (tmp_path / "checkpoints").write_text("")  # not a folder
    assert runs.committed_epochs(tmp_path) == []


def test_no_records_write_no_log(fault_state, tmp_path):
    assert runs.write_log(tmp_path) is None and os.listdir(tmp_path) == []


def test_the_records_are_written_as_utf8_lines_and_then_forgotten(fault_state, tmp_path):
    fault_state.records.extend(["checkpoint 2: écrit à moitié — 写入失败", "Traceback (most recent call last):\n"
                                "OSError: [Errno 28] No space left on device\n"])
    assert runs.write_log(tmp_path) == tmp_path / "errors.log"
    assert (tmp_path / "errors.log").read_bytes() == (
        "checkpoint 2: écrit à moitié — 写入失败\nTraceback (most recent call last):\n"
        "OSError: [Errno 28] No space left on device\n\n").encode("utf-8")
    assert fault_state.records == [] and os.listdir(tmp_path) == ["errors.log"]
    assert runs.write_log(tmp_path) is None  # written once: a second call has nothing more to add


def test_a_later_failure_is_appended_to_the_log(fault_state, tmp_path):
    (tmp_path / "errors.log").write_bytes(b"the first failure\n")
    fault_state.records.append("the second failure")
    assert runs.write_log(tmp_path) == tmp_path / "errors.log"
    assert (tmp_path / "errors.log").read_bytes() == b"the first failure\nthe second failure\n"


def test_errors_log_is_opened_to_append_in_utf8_whatever_the_locale(fault_state, tmp_path, monkeypatch):
    """The tests run in a UTF-8 locale, where the default encoding would pass too: the call itself is checked."""
    opened = []

    def spy(path, mode="r", **kwargs):
        opened.append((path, mode, kwargs))
        return open(path, mode, **kwargs)

    monkeypatch.setattr(runs, "open", spy, raising=False)  # found before the builtin by runs.py's own lookups
    fault_state.records.append("a failure")
    assert runs.write_log(tmp_path) == tmp_path / "errors.log"
    [(fd, mode, kwargs)] = opened  # the descriptor append_text opened without following a link
    assert (type(fd), mode, set(kwargs)) == (int, "a", {"encoding", "closefd"})
    assert codecs.lookup(kwargs["encoding"]).name == "utf-8"  # given, whatever its spelling


def test_a_log_the_disk_refuses_to_start_is_not_written_and_its_records_are_kept(fault_state, tmp_path,
                                                                                 monkeypatch):
    def refuses(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs, "open", refuses, raising=False)
    fault_state.records.append("a failure")
    # Removing a log that was never made fails too (FileNotFoundError): quietly, the line still gets said.
    assert runs.write_log(tmp_path) is None
    assert fault_state.records == ["a failure"] and os.listdir(tmp_path) == []


def test_a_log_the_disk_fills_up_during_is_put_back_as_it_was(fault_state, tmp_path, monkeypatch):
    real_open = open

    def fills_up(path, mode, **kwargs):
        """A file whose first bytes reach the disk before the disk is full."""
        out = real_open(path, mode, **kwargs)
        out.write("half a rec")
        out.flush()
        out.write = lambda text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
        return out

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "errors.log").write_bytes(b"the first failure\n")
    (tmp_path / "new").mkdir()
    monkeypatch.setattr(runs, "open", fills_up, raising=False)
    fault_state.records.append("the second failure")
    assert runs.write_log(tmp_path / "old") is None and runs.write_log(tmp_path / "new") is None
    assert (tmp_path / "old" / "errors.log").read_bytes() == b"the first failure\n"  # truncated back
    assert os.listdir(tmp_path / "new") == []  # a new log is removed
    assert fault_state.records == ["the second failure"]


def test_a_fault_after_a_committed_epoch_says_which_and_how_to_resume_and_names_its_log(fault_state, tmp_path):
    run = tmp_path / "r"
    for step in ("9", "10", "11.orbax-checkpoint-tmp-7"):
        (run / "checkpoints" / step).mkdir(parents=True)
    fault_state.records.append("metrics.jsonl: OSError: [Errno 28] No space left on device")
    fault = faults.WriteFault("metrics.jsonl", run, "No space left on device [ENOSPC]")
    assert runs.stopped_line(fault) == (
        f"could not write metrics.jsonl in {run}: No space left on device [ENOSPC]; epoch 10 is safely on disk (its "
        f"checkpoint); once the cause is fixed (free space, a writable folder), continue with: jaxintro train "
        f"--resume {run} (details in {run / 'errors.log'})")
    assert (run / "errors.log").read_bytes() == b"metrics.jsonl: OSError: [Errno 28] No space left on device\n"
    assert fault_state.records == []


def test_a_fault_with_no_records_names_no_log(fault_state, tmp_path):
    (tmp_path / "checkpoints" / "1").mkdir(parents=True)
    fault = faults.WriteFault("curves.png", tmp_path, "Input/output error [EIO]")
    assert runs.stopped_line(fault) == (
        f"could not write curves.png in {tmp_path}: Input/output error [EIO]; epoch 1 is safely on disk (its "
        f"checkpoint); once the cause is fixed (free space, a writable folder), continue with: jaxintro train "
        f"--resume {tmp_path}")
    assert not (tmp_path / "errors.log").exists()


def test_a_fault_before_any_committed_epoch_says_to_run_the_same_command_again(fault_state, tmp_path):
    (tmp_path / "checkpoints" / "1.orbax-checkpoint-tmp-3").mkdir(parents=True)  # begun, never committed
    fault_state.records.append("checkpoint 1: ValueError: INTERNAL: os_error_code=30")
    fault = faults.WriteFault("checkpoint 1", tmp_path, "Read-only file system [EROFS]")
    assert runs.stopped_line(fault) == (
        f"could not write checkpoint 1 in {tmp_path}: Read-only file system [EROFS]; no epoch was on disk yet, so "
        f"there is nothing to continue from: once the cause is fixed, run the same command again (details in "
        f"{tmp_path / 'errors.log'})")
    assert (tmp_path / "errors.log").read_bytes() == b"checkpoint 1: ValueError: INTERNAL: os_error_code=30\n"


def test_a_fault_whose_folder_was_never_made_says_to_run_again_and_writes_no_log(fault_state, tmp_path):
    run = tmp_path / "missing" / "r"
    fault_state.records.append("the claim of the run folder: OSError: [Errno 28] No space left on device")
    fault = faults.WriteFault("the claim of the run folder", run, "No space left on device [ENOSPC]")
    assert runs.stopped_line(fault) == (
        f"could not write the claim of the run folder in {run}: No space left on device [ENOSPC]; no epoch was on "
        f"disk yet, so there is nothing to continue from: once the cause is fixed, run the same command again")
    assert os.listdir(tmp_path) == []  # nothing made to hold a log
    assert fault_state.records == ["the claim of the run folder: OSError: [Errno 28] No space left on device"]


@pytest.mark.parametrize("remade", [True, False], ids=["made-again-by-orbax", "gone"])
def test_a_vanished_folder_says_to_start_again_and_writes_no_log_into_what_is_left(remade: bool, fault_state,
                                                                                    tmp_path):
    """What Orbax made again in the folder's place is not the run: no epoch of it is offered, no log left in it."""
    run = tmp_path / "r"
    if remade:
        (run / "checkpoints" / "2").mkdir(parents=True)
    fault_state.records.append("checkpoint 2: ValueError: INTERNAL: os_error_code=2")
    fault = faults.WriteFault("checkpoint 2", run, GONE, vanished=True)
    assert runs.stopped_line(fault) == (f"could not write checkpoint 2 in {run}: {GONE}; its checkpoints went with "
                                          f"it, so the run stopped: start it again")
    assert not (run / "errors.log").exists()
    assert fault_state.records == ["checkpoint 2: ValueError: INTERNAL: os_error_code=2"]


class _RaisesWhenCollected:
    """An object whose finalizer raises: Python can only hand the error to `sys.unraisablehook`."""

    def __del__(self):
        raise OSError("TensorStore: the folder is gone")


def test_what_a_failed_library_call_left_behind_is_collected_into_the_records(kept):
    before = sys.unraisablehook

    async def save():
        return None

    left = [save()]  # a coroutine never awaited, as Orbax leaves one when a save fails, in a cycle: only the
    left.append(left)  # garbage collector frees it (and Python warns then)
    del left
    cycle = _RaisesWhenCollected()
    cycle.self = cycle  # only the garbage collector can free it
    del cycle
    faults.collect_abandoned()
    assert sys.unraisablehook is before  # put back: later exceptions are Python's to show again
    assert len(kept) == 2
    [warning] = [record for record in kept if "was never awaited" in record]
    assert "coroutine " in warning and ".save' was never awaited" in warning  # as warnings.formatwarning says it
    [error] = [record for record in kept if record is not warning]
    assert error.startswith("Traceback (most recent call last):") and error.endswith(
        "OSError: TensorStore: the folder is gone\n")
