"""Signals in one process: SIGTERM stops like the first Ctrl-C (exit 143); a second Ctrl-C quits at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

from jaxintro import checkpoint
from jaxintro.cli import main
from jaxintro.evaluate import load_run

DIGITS = ["--dataset", "digits"]


def start(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "train", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def wait_for_epoch(proc: subprocess.Popen, epoch: int) -> str:
    """Read stdout until the line of `epoch`; return it."""
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("Epoch") and int(line.split("|")[0].split()[1]) >= epoch:
            return line
    raise AssertionError(f"training ended before epoch {epoch}: {proc.stderr.read()}")  # type: ignore[union-attr]


def test_sigterm_stops_after_a_checkpoint_with_exit_143_and_resumes_to_the_same_result(capsys, tmp_path):
    proc = start([*DIGITS, "--epochs", "100000", "--run-dir", str(tmp_path / "r"), "--json"])
    try:
        wait_for_epoch(proc, 2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "SIGTERM: stopping after this epoch's checkpoint" in err and "Traceback" not in err
    assert f"continue with: jaxintro train --resume {tmp_path / 'r'}" in out
    stopped = json.loads(out.strip().splitlines()[-1])["epochs"]
    assert checkpoint.read_meta(tmp_path / "r")["epoch"] == stopped
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--epochs", str(stopped + 1), "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", *DIGITS, "--epochs", str(stopped + 1), "--run-dir", str(tmp_path / "whole"), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["final_loss"] == whole["final_loss"] and resumed["test_accuracy"] == whole["test_accuracy"]


def test_a_second_ctrl_c_quits_in_the_middle_of_a_long_compiled_epoch(tmp_path, mnist_dir):
    # Wide layers make one compiled epoch of MNIST take seconds (about 4 at 512,512 on 2 cores): long enough to tell
    # "now" from "after the epoch".
    proc = start(["--dataset", "mnist", "--data-dir", str(mnist_dir), "--hidden", "512,512", "--epochs", "100",
                  "--run-dir", str(tmp_path / "r"), "--no-compile-cache"])
    try:
        line = wait_for_epoch(proc, 1)
        epoch_seconds = float(re.search(r"\| ([0-9.]+)s$", line.strip()).group(1))
        deadline = time.monotonic() + 60
        while not (tmp_path / "r" / "checkpoints" / "1").is_dir():  # Orbax renames it into place once complete
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(min(0.5, epoch_seconds / 6))  # inside epoch 2, early: however fast this machine is
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(min(0.2, epoch_seconds / 15))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "Ctrl-C again: quitting now" in err and "Epoch 2" not in out
    # It did not wait for the running epoch: it left in a fraction of one epoch's time.
    assert waited < epoch_seconds / 2, (waited, epoch_seconds)
    assert load_run(tmp_path / "r").epoch == 1  # the checkpoint written before is intact


# Sends SIGINT to itself at each step of GracefulStop's setup (before/after the wake-up pipe, before/after the
# handler), through libc so that Python runs no handler at the send, and says what became of each Ctrl-C.
SETUP_RACE = r"""
import ctypes, json, os, signal, sys, time
from jaxintro.signals import GracefulStop

libc = ctypes.CDLL(None)
real = {"set_wakeup_fd": signal.set_wakeup_fd, "signal": signal.signal}
outcomes = {}
for name in real:
    for when in ("before", "after"):
        def send_once(*args, _name=name, _when=when, _sent=[], **kwargs):
            if _when == "before" and not _sent:
                _sent.append(libc.kill(os.getpid(), signal.SIGINT))
            result = real[_name](*args, **kwargs)
            if _when == "after" and not _sent:
                _sent.append(libc.kill(os.getpid(), signal.SIGINT))
            return result
        setattr(signal, name, send_once)
        try:
            with GracefulStop() as stop:
                setattr(signal, name, real[name])
                deadline = time.monotonic() + 5
                while not stop.requested and time.monotonic() < deadline:
                    time.sleep(0.01)
                outcome = "stop requested" if stop.requested else "lost"
        except KeyboardInterrupt:
            outcome = "KeyboardInterrupt"
        setattr(signal, name, real[name])
        restored = signal.getsignal(signal.SIGINT) is signal.default_int_handler and signal.set_wakeup_fd(-1) == -1
        outcomes[f"{when} {name}"] = [outcome, restored]
print(json.dumps(outcomes))
"""


def test_a_ctrl_c_while_the_watcher_is_being_installed_is_never_lost():
    # The old order (handlers, then the wake-up pipe) lost a Ctrl-C sent between the two: `jaxintro serve`, stopped
    # as soon as it printed "Ctrl-C to stop", then served on.
    done = subprocess.run([sys.executable, "-c", SETUP_RACE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes = json.loads(done.stdout)
    assert len(outcomes) == 4
    for step, (outcome, restored) in outcomes.items():
        assert outcome in ("stop requested", "KeyboardInterrupt"), step  # the Ctrl-C did something, at once
        assert restored, step  # and the process's handlers are as they were before the `with`
