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

DIGITS = ["--dataset", "digits", "--save-every", "0"]  # every epoch saved: these tests count checkpoints


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
                  "--save-every", "0", "--run-dir", str(tmp_path / "r"), "--no-compile-cache"])
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


# Sends SIGINT to itself just before or after a step of GracefulStop's setup or teardown (its wake-up pipe, its
# handler), through libc so that the signal lands exactly at that step, and says what became of each Ctrl-C.
RACE = r"""
import ctypes, json, os, signal, sys, threading, time
from jaxintro.signals import GracefulStop

libc = ctypes.CDLL(None)
real = {"set_wakeup_fd": signal.set_wakeup_fd, "signal": signal.signal}


def sending(name, when):
    sent = []
    def call(*args, **kwargs):
        if when == "before" and not sent:
            sent.append(libc.kill(os.getpid(), signal.SIGINT))
        result = real[name](*args, **kwargs)
        if when == "after" and not sent:
            sent.append(libc.kill(os.getpid(), signal.SIGINT))
        return result
    return call


outcomes = {}
for phase in ("setup", "teardown"):
    for name in real:
        for when in ("before", "after"):
            stop = GracefulStop()
            try:
                if phase == "setup":
                    setattr(signal, name, sending(name, when))
                with stop:
                    setattr(signal, name, sending(name, when) if phase == "teardown" else real[name])
                    deadline = time.monotonic() + 5
                    while phase == "setup" and not stop.requested and time.monotonic() < deadline:
                        time.sleep(0.01)
                outcome = "stop requested" if stop.requested else "lost"
            except KeyboardInterrupt:
                outcome = "KeyboardInterrupt"
            setattr(signal, name, real[name])
            handlers = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            watcher_gone = stop._pipe is None and not any(t.name == "jaxintro-signals" for t in threading.enumerate())
            outcomes[f"{phase}: {when} {name}"] = [outcome, handlers, watcher_gone, signal.set_wakeup_fd(-1) == -1]
print(json.dumps(outcomes))
"""


def test_a_ctrl_c_while_the_watcher_is_set_up_or_taken_down_is_never_lost():
    # The old order (handlers, then the wake-up pipe; undone pipe first) lost a Ctrl-C sent between the two:
    # `jaxintro serve`, stopped as soon as it printed "Ctrl-C to stop", then served on.
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes = json.loads(done.stdout)
    assert len(outcomes) == 8
    for step, (outcome, handlers, watcher_gone, wakeup_fd) in outcomes.items():
        assert outcome in ("stop requested", "KeyboardInterrupt"), (step, outcome)  # the Ctrl-C did something
        # And the process is as it was before the `with`: its handlers, no pipe, no watcher; and no wake-up fd, but
        # where the KeyboardInterrupt is raised in our sender, before the real call that would have restored it.
        assert handlers and watcher_gone, step
        assert wakeup_fd or step == "teardown: before set_wakeup_fd", step
