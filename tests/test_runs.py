"""Run folders: a failed start leaves no debris, a folder without a checkpoint is free again, `jaxintro runs`."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jaxintro import claims, jsonio, listing, runs
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError

DIGITS = ["--dataset", "digits"]


def test_a_failed_data_load_leaves_nothing_and_the_corrected_command_works(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = ["train", "--dataset", "mnist", "--data-dir", str(tmp_path / "nowhere"), "--epochs", "1"]
    assert main([*bad, "--run-dir", "myrun"]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    assert not (tmp_path / "myrun").exists()  # the folder it created is gone
    (tmp_path / "mine").mkdir()
    assert main([*bad, "--run-dir", "mine"]) == 2
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())  # the user's folder, emptied
    assert main(bad) == 2  # a timestamped folder is removed whole
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", "myrun"]) == 0


def test_a_run_killed_before_its_first_checkpoint_frees_its_folder(tmp_path, capsys):
    folder = tmp_path / "r"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / runs.CLAIM_FILE).write_text(f"{dead.pid} {os.uname().nodename}\n")  # a SIGKILLed run's claim
    (folder / runs.CONFIG_FILE).write_text("{}")
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(folder)]) == 0


def test_a_live_claim_or_a_checkpointed_run_is_refused_with_the_way_forward(tmp_path, capsys):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / runs.CLAIM_FILE).write_text(f"{os.getppid()} {os.uname().nodename}\n")  # a live process
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and f"--resume {folder}" in err and "jaxintro runs" in err
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "done")]) == 0
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(tmp_path / "done")]) == 2


def test_runs_lists_each_folder_and_removes_only_unfinished_ones(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    assert main(["train", *DIGITS, "--epochs", "2", "--run-dir", str(root / "finished")]) == 0
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(root / "stopped")]) == 0
    result = json.loads((root / "stopped" / runs.RESULT_FILE).read_text())
    (root / "stopped" / runs.RESULT_FILE).write_text(json.dumps({**result, "finished": False}))
    empty_run(root / "empty")
    # A run still training: its folder holds the config and the claim of a live process (this one), no result.
    empty_run(root / "training")
    (root / "training" / runs.CLAIM_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    capsys.readouterr()
    assert main(["runs", "--root", str(root), "--json"]) == 0
    listed = {Path(r["run_dir"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert listed["finished"]["status"] == "finished" and listed["finished"]["epochs"] == 2
    assert listed["finished"]["dataset"] == "digits" and listed["finished"]["test_accuracy"] > 0.5
    assert listed["stopped"]["status"].startswith("stopped after epoch 1: jaxintro train --resume")
    assert listed["empty"]["status"] == "empty (no checkpoint)"
    assert listed["training"]["status"] == "running"
    assert main(["runs", "--root", str(root), "--remove-unfinished"]) == 2  # no terminal to ask: needs --yes
    assert "--yes" in capsys.readouterr().err and (root / "empty").exists()

    # At a terminal it asks, listing what it would remove; anything but yes removes nothing.
    answers: list[str] = []
    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: answers.pop(0))
    answers.append("n")
    assert main(["runs", "--root", str(root), "--remove-unfinished"]) == 0
    out = capsys.readouterr().out
    assert "Will remove 1 unfinished run folder (no checkpoint, nobody running it):" in out
    assert f"  {root / 'empty'}  (empty (no checkpoint))" in out
    assert f"Keeping {root / 'stopped'}: it holds a checkpoint: continue it with jaxintro train --resume" in out
    assert f"  {root / 'training'}  (" not in out and out.strip().endswith("Nothing removed.")
    assert sorted(p.name for p in root.iterdir()) == ["empty", "finished", "stopped", "training"]
    answers.append(" Sí ")  # Spanish answers too
    assert main(["runs", "--root", str(root), "--remove-unfinished"]) == 0
    assert capsys.readouterr().out.strip().endswith("Removed 1 folder.") and not answers
    assert sorted(p.name for p in root.iterdir()) == ["finished", "stopped", "training"]

    # --yes removes without asking; the live run and the checkpoint are kept still.
    empty_run(root / "empty")
    assert main(["runs", "--root", str(root), "--remove-unfinished", "--yes"]) == 0
    assert sorted(p.name for p in root.iterdir()) == ["finished", "stopped", "training"]


def test_removal_decides_first_and_keeps_links_damage_and_late_claims(tmp_path, capsys, monkeypatch):
    root, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    for name in ("a-empty", "b-claimed-meanwhile", "d-empty"):
        empty_run(root / name) if root.exists() else (root.mkdir(), empty_run(root / name))
    empty_run(elsewhere)
    (root / "c-link").symlink_to(elsewhere, target_is_directory=True)  # sorts between the others
    damaged = root / "e-damaged"
    damaged.mkdir()
    (damaged / runs.CONFIG_FILE).write_text(json.dumps({"epochs": 1}))
    (damaged / runs.RESULT_FILE).write_text('{"epochs": 1, "fin')  # truncated
    (damaged / runs.CHECKPOINT_DIR / "1").mkdir(parents=True)

    def answer(prompt):  # while the user reads the list, a run claims one of the folders
        (root / "b-claimed-meanwhile" / runs.CLAIM_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
        return "y"

    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", answer)
    assert main(["runs", "--root", str(root), "--remove-unfinished"]) == 0
    out = capsys.readouterr().out
    assert f"Keeping {root / 'c-link'}: a symbolic link" in out and f"Keeping {damaged}: its files cannot be read" in out
    assert "Removed 2 folders." in out and "Kept 1 that changed since they were listed" in out
    assert sorted(p.name for p in root.iterdir()) == ["b-claimed-meanwhile", "c-link", "e-damaged"]
    assert (elsewhere / runs.CONFIG_FILE).is_file() and (damaged / runs.CHECKPOINT_DIR / "1").is_dir()


CRAFTED = {  # a folder's file -> what a classmate's (or a broken) run folder might hold there
    "config []": (runs.CONFIG_FILE, "[]"), "config string": (runs.CONFIG_FILE, '"hello"'),
    "config epochs abc": (runs.CONFIG_FILE, '{"epochs": "abc"}'),
    "config Infinity": (runs.CONFIG_FILE, '{"epochs": Infinity}'), "config NaN": (runs.CONFIG_FILE, "NaN"),
    "config [1]": (runs.CONFIG_FILE, "[1]"), "config seeds x": (runs.CONFIG_FILE, '{"epochs": 1, "seeds": "x"}'),
    "config deep": (runs.CONFIG_FILE, "[" * 100_000 + "]" * 100_000),
    "row {}": (runs.METRICS_FILE, "{}"), "row [1]": (runs.METRICS_FILE, "[1]"),
    "row accuracy x": (runs.METRICS_FILE, '{"epoch": 1, "test_accuracy": "x"}'),
    "row members 5": (runs.METRICS_FILE, '{"epoch": 1, "members": 5}'),
    "result [1]": (runs.RESULT_FILE, "[1]"), "result finished no": (runs.RESULT_FILE, '{"finished": "no"}'),
    "dataset escape": (runs.CONFIG_FILE, json.dumps({"epochs": 1, "dataset": "\x1b]0;pwned\x07digits"})),
}


@pytest.mark.timeout(60)  # a FIFO opened for reading blocks for ever: a broken guard fails here, never hangs
def test_a_crafted_folder_is_one_unreadable_line_and_the_others_list(tmp_path, capsys):
    root = tmp_path / "runs"
    empty_run(root / "good") if root.mkdir() is None else None
    for name, (file, text) in CRAFTED.items():
        empty_run(root / name)
        (root / name / file).write_text(text)
    for name, pid in (("claim huge", "99999999999999999999"), ("claim 0", "0"), ("claim -1", "-1")):
        empty_run(root / name)
        (root / name / runs.CLAIM_FILE).write_text(f"{pid} {socket.gethostname()}\n")
    empty_run(root / "fifo")
    (root / "fifo" / runs.CONFIG_FILE).unlink()
    os.mkfifo(root / "fifo" / runs.CONFIG_FILE)  # would block a plain open() for ever
    empty_run(root / "zero")
    (root / "zero" / runs.METRICS_FILE).symlink_to("/dev/zero")  # would read until memory runs out
    (root / "a\x1b[31mred").mkdir()
    (root / "a\x1b[31mred" / runs.CONFIG_FILE).write_text("{}")
    assert main(["runs", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "\x1b" not in out and "\x07" not in out and "a\\x1b[31mred" in out
    lines = {line.split()[0].rsplit("/", 1)[-1]: line for line in out.splitlines()}
    assert "empty (no checkpoint)" in lines["good"]
    escaped = next(line for line in out.splitlines() if "pwned" in line)
    assert "\\x1b]0;pwned\\x07digits" in escaped
    assert main(["runs", "--root", str(root), "--json"]) == 0
    listed = {Path(r["run_dir"]).name: r for r in json.loads(capsys.readouterr().out)}
    unreadable = {name for name, r in listed.items() if r["status"] == "unreadable"}
    assert unreadable == {*CRAFTED} - {"dataset escape"} | {"fifo", "zero"}
    assert all(listed[name]["reason"] for name in unreadable)
    assert "not a regular file" in listed["fifo"]["reason"] and "symbolic link" in listed["zero"]["reason"]
    assert {listed[name]["status"] for name in ("claim huge", "claim 0", "claim -1")} == {"empty (no checkpoint)"}


def empty_run(folder: Path) -> None:
    """A run folder as `train` leaves it before its first checkpoint: the config alone."""
    folder.mkdir()
    (folder / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 10}))


def test_each_folder_is_described_from_its_files_alone(tmp_path):
    assert listing.describe_run(tmp_path) is None  # neither a config nor a claim: not a run
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / runs.CONFIG_FILE).write_text("{half a config")
    assert listing.describe_run(unreadable) == {
        "run_dir": str(unreadable), "dataset": "?", "model": "?", "epochs": 0, "planned_epochs": 0, "kind": "?",
        "member_count": 0, "diverged": 0, "test_accuracy": None, "status": "unreadable", "result": None,
        "reason": "config.json: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"}
    # Claimed by this live process, before its config is written: running.
    starting = claims.claim_run_dir(tmp_path / "starting")
    assert listing.describe_run(starting) == {
        "run_dir": str(starting), "dataset": "?", "model": "?", "epochs": 0, "planned_epochs": 0, "kind": "single",
        "member_count": 1, "diverged": 0, "test_accuracy": None, "status": "running", "result": None}
    # A finished run of an older version: result.json without "finished", judged by its epoch count.
    old = tmp_path / "old"
    empty_run(old)
    (old / runs.CONFIG_FILE).write_text(json.dumps({"dataset": "auto", runs.RESOLVED_DATASET: "digits",
                                                    "model": "flax", "epochs": 3}))
    (old / runs.RESULT_FILE).write_text(json.dumps({"epochs": 3}))
    info = listing.describe_run(old)
    assert (info["dataset"], info["model"], info["planned_epochs"], info["status"]) == ("digits", "flax", 3, "finished")
    assert listing.status_text(info) == "finished"
    # A process that died between committing checkpoint 1 and writing its row to metrics.jsonl (a lost peer's
    # survivor exits at once): stopped after epoch 1, where a resume goes on from (it once said 0).
    stopped = tmp_path / "stopped"
    (stopped / "checkpoints" / "1").mkdir(parents=True)
    (stopped / "checkpoints" / "2.orbax-checkpoint-tmp-3").mkdir()  # a step Orbax never finished
    (stopped / runs.CONFIG_FILE).write_text(json.dumps({"dataset": "digits", "epochs": 3}))
    info = listing.describe_run(stopped)
    assert info["epochs"] == 1 and listing.status_text(info) == f"stopped after epoch 1: jaxintro train --resume {stopped}"
    # Older configs: the dataset as asked (before `auto` was resolved), or "?" without one.
    for config, dataset in (({"dataset": "mnist", "epochs": 1}, "mnist"), ({"epochs": 1}, "?")):
        (old / runs.CONFIG_FILE).write_text(json.dumps(config))
        assert listing.describe_run(old)["dataset"] == dataset


def test_a_runs_end_is_read_from_its_result():
    assert runs.is_finished({"finished": True, "epochs": 2}, 5)  # the result's own word wins over the count
    assert not runs.is_finished({"finished": False, "epochs": 5}, 5)
    assert runs.is_finished({"epochs": 5}, 5) and not runs.is_finished({"epochs": 4}, 5)
    assert not runs.is_finished(None, 0)
    stopped = {"status": "stopped after epoch 2: ...", "epochs": 2, "run_dir": "runs/a"}
    assert listing.status_text(stopped) == "stopped after epoch 2: jaxintro train --resume runs/a"


class Terminal(io.StringIO):
    """Standard input that is a terminal."""

    def isatty(self) -> bool:
        return True


def test_version_and_defaults_in_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("jaxintro ")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("--lr LR learning rate (peak, with a schedule) (default: 0.001)", "(default: 128)",
                  "(default: 256,128)", "(default: scan)", "(default: 10; with --resume: the run's own)",
                  "dropout rate in [0, 1) (default: 0.0)",
                  "and dropout (default: 0)"):  # a default of 0 is a default (0 == False in Python)
        assert shown in text, shown


def test_help_does_not_import_jax():
    code = "import sys; from jaxintro.cli import main\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n" \
           "print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_a_folder_that_cannot_be_created_is_refused_naming_the_flag(tmp_path):
    assert runs.writable_dir(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the write test leaves nothing
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as err:
        runs.writable_dir(tmp_path / "file" / "sub", "--out")
    assert str(err.value) == f"--out {tmp_path / 'file' / 'sub'} is not writable (Not a directory); choose another folder"
    assert runs.writable_dir(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"  # one that exists is fine


def test_the_newest_finished_run_is_the_one_whose_result_was_written_last(tmp_path):
    assert listing.newest_finished_run(tmp_path) is None
    for name, finished, written in (("old", True, 1_000), ("new", True, 2_000), ("newest-but-stopped", False, 3_000)):
        empty_run(tmp_path / name)
        (tmp_path / name / runs.RESULT_FILE).write_text(json.dumps({"finished": finished, "epochs": 10}))
        os.utime(tmp_path / name / runs.RESULT_FILE, (written, written))
    assert listing.newest_finished_run(tmp_path) == tmp_path / "new"


def test_run_files_are_written_beside_their_target_not_in_the_temp_folder(tmp_path, monkeypatch):
    # /tmp may be another file system: a rename from there is not atomic, or fails. Here there is none at all.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    runs.write_atomic(tmp_path / "config.json", "{}")
    assert (tmp_path / "config.json").read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["config.json"]
    assert runs.writable_dir(tmp_path / "out", "--out") == tmp_path / "out"


def test_a_freed_run_folder_is_empty_and_a_vanished_one_is_no_error(tmp_path):
    folder = tmp_path / "mine"
    (folder / runs.CHECKPOINT_DIR).mkdir(parents=True)  # a first checkpoint was being written, none finished
    for name in (runs.CLAIM_FILE, runs.CONFIG_FILE, runs.METRICS_FILE, "curves.png"):
        (folder / name).write_text("x")
    claims.discard_run_dir(folder, created=False)  # the user named it: keep the folder, free it
    assert folder.is_dir() and list(folder.iterdir()) == []
    claims.discard_run_dir(folder, created=True)
    assert not folder.exists()
    claims.discard_run_dir(folder, created=True)  # removed meanwhile (by the user): nothing to do, no traceback


def test_a_default_run_folder_is_named_by_the_time_then_numbered_and_holds_the_claim(tmp_path, monkeypatch):
    noon = dt.datetime(2026, 12, 4, 12, 0, 0)

    class Clock:
        @staticmethod
        def now() -> dt.datetime:
            return noon

    monkeypatch.setattr(claims.dt, "datetime", Clock)
    root = tmp_path / "new" / "runs"  # made, parents too
    umask = os.umask(0o022)
    try:
        first, second = claims.claim_run_dir(None, root), claims.claim_run_dir(None, root)
    finally:
        os.umask(umask)
    assert (first, second) == (root / "20261204-120000", root / "20261204-120000-1")
    assert (first / runs.CLAIM_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    assert (first / runs.CLAIM_FILE).stat().st_mode & 0o777 == 0o644
    for attempt in range(2, 1000):  # a thousand runs in one second: the next one gives up, with a way out
        (root / f"20261204-120000-{attempt}").mkdir()
    with pytest.raises(ConfigError) as err:
        claims.claim_run_dir(None, root)
    assert str(err.value) == f"could not claim a new run folder under {root}; pass --run-dir DIR"
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError) as err:
        claims.claim_run_dir(None, tmp_path / "file")
    assert str(err.value) == f"cannot create the runs folder {tmp_path / 'file'}: File exists; pass --run-dir DIR"


def test_a_named_folder_that_holds_a_run_is_live_or_cannot_be_written_is_refused_whole(tmp_path):
    done, live, blocked = tmp_path / "done", tmp_path / "live", tmp_path / "file" / "run"
    (done / runs.CHECKPOINT_DIR / "10").mkdir(parents=True)  # a finished checkpoint: a run to resume
    live.mkdir()
    (live / runs.CLAIM_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")  # this process holds it
    (tmp_path / "file").write_text("not a folder")
    for folder in (done, live):
        with pytest.raises(ConfigError) as err:
            claims.claim_run_dir(folder)
        assert str(err.value) == (f"--run-dir {folder} already holds a run; choose another folder, continue it with "
                                  f"--resume {folder}, or see `jaxintro runs`")
    assert not (done / runs.CLAIM_FILE).exists()  # the refused claim is taken back
    with pytest.raises(ConfigError) as err:
        claims.claim_run_dir(blocked)
    assert str(err.value) == f"--run-dir {blocked} is not writable (Not a directory); choose another folder"


def test_a_claim_is_live_while_its_process_runs_or_when_another_host_made_it(tmp_path):
    marker = tmp_path / runs.CLAIM_FILE
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for text, live in [(f"{os.getpid()} {socket.gethostname()}", True), (f"{os.getpid()}", True),
                       (f"{finished.stdout.strip()} {socket.gethostname()}", False),
                       (f"{os.getpid()} another-host", True), ("not a pid", False)]:
        marker.write_text(text + "\n")
        assert claims.claim_is_live(tmp_path) is live, text


def test_json_safe_turns_every_nan_and_infinity_into_null_at_any_depth():
    value = {"a": [1.0, float("nan"), (2, float("inf"))], "b": {"c": -float("inf"), "d": "x"}}
    assert jsonio.json_safe(value) == {"a": [1.0, None, [2, None]], "b": {"c": None, "d": "x"}}


def test_json_files_are_indented_with_sorted_keys_and_end_with_a_newline(tmp_path):
    # config.json and result.json are read by people too (the docs show them): two spaces, keys in order.
    runs.write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    assert (tmp_path / "a.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    runs.write_json(target, {"epoch": 1})

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device"):  # the disk's own error, not another one
        runs.write_json(target, {"epoch": 2})
    assert json.loads(target.read_text()) == {"epoch": 1} and os.listdir(tmp_path) == ["result.json"]


def test_a_full_disk_names_the_write_it_stopped(tmp_path, monkeypatch):
    from jaxintro.faults import WriteFault

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(WriteFault) as metrics:
        runs.write_metrics(tmp_path, [{"epoch": 1}])
    monkeypatch.setattr(os, "open", full_disk)
    with pytest.raises(WriteFault) as claim:
        claims._write_claim(tmp_path / runs.CLAIM_FILE)
    assert str(metrics.value) == "metrics.jsonl: No space left on device [ENOSPC]"
    assert str(claim.value) == "the claim of the run folder: No space left on device [ENOSPC]"
    assert os.listdir(tmp_path) == []  # neither left a file behind


def test_a_claim_by_another_users_process_is_live(tmp_path, monkeypatch):
    (tmp_path / runs.CLAIM_FILE).write_text(f"1 {socket.gethostname()}\n")

    def not_yours(pid: int, signum: int) -> None:  # what the kernel says of another user's process
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_yours)
    assert claims.claim_is_live(tmp_path)


# ---------------------------------------------------------------- what `jaxintro runs` prints, one function each


@pytest.mark.parametrize("info, text", [
    ({}, "1 model"),
    ({"member_count": 3}, "1 model"),  # a count without a kind is one model
    ({"kind": "sweep", "member_count": 6}, "sweep: 6 models"),
    ({"kind": "sweep", "member_count": 1}, "sweep: 1 model"),
    ({"kind": "sweep"}, "sweep: 1 model"),
    ({"kind": "seeds", "member_count": 8}, "8 seeds"),
    ({"kind": "seeds", "member_count": 1}, "1 seed"),
    ({"kind": "seeds"}, "1 seed"),
    ({"kind": "seeds", "member_count": 8, "diverged": 2}, "8 seeds, 2 diverged"),
    ({"kind": "sweep", "member_count": 6, "diverged": 1}, "sweep: 6 models, 1 diverged"),
    ({"kind": "seeds", "member_count": 8, "diverged": 0}, "8 seeds"),
    ({"diverged": 1}, "1 model, 1 diverged"),
])
def test_kind_text_counts_models_seeds_and_the_diverged(info, text):
    assert listing.kind_text(info) == text


def test_kind_text_in_spanish_counts_one_and_many_apart():
    """English says "1 diverged" and "2 diverged" alike; Spanish does not."""
    from jaxintro.i18n import set_language

    set_language("es")  # the autouse fixture sets the locale's language back as the test ends
    assert [listing.kind_text({"kind": "seeds", "member_count": 8, "diverged": n}) for n in (1, 2)] == [
        "8 semillas, 1 divergido", "8 semillas, 2 divergidos"]
    assert listing.kind_text({"kind": "sweep", "member_count": 1}) == "barrido: 1 modelo"


@pytest.mark.parametrize("info, text", [
    ({"status": "finished"}, "finished"),
    ({"status": "running"}, "running"),
    ({"status": "empty (no checkpoint)"}, "empty (no checkpoint)"),
    ({"status": "unreadable"}, "unreadable"),
    ({"status": "unreadable", "reason": "config.json: not a JSON object"}, "unreadable: config.json: not a JSON object"),
    ({"status": "stopped", "epochs": 3, "run_dir": "runs/a"}, "stopped after epoch 3: jaxintro train --resume runs/a"),
])
def test_status_text_is_each_status_as_a_learner_reads_it(info, text):
    assert listing.status_text(info) == text


def test_keep_reason_says_why_each_kind_of_folder_stays(tmp_path):
    """Finished and running runs, links, unreadable folders, checkpoints and live claims stay; nothing else."""
    folder = tmp_path / "run"
    folder.mkdir()
    info = {"run_dir": str(folder)}
    assert listing.keep_reason({**info, "status": "finished"}) == "finished"
    assert listing.keep_reason({**info, "status": "running"}) == "running"
    assert listing.keep_reason({**info, "status": "unreadable"}) == "its files cannot be read: look at it first"
    assert listing.keep_reason({**info, "status": "empty (no checkpoint)"}) is None
    (folder / runs.CLAIM_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    assert listing.keep_reason({**info, "status": "empty (no checkpoint)"}) == "a live process claims it"
    (folder / "checkpoints" / "2").mkdir(parents=True)
    assert listing.keep_reason({**info, "status": "stopped"}) == (
        f"it holds a checkpoint: continue it with jaxintro train --resume {folder}")
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert listing.keep_reason({"run_dir": str(link), "status": "unreadable"}) == (
        "a symbolic link: remove the link itself if you mean to")


def test_a_folder_that_cannot_be_removed_is_kept_with_one_line_saying_why(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()

    @contextlib.contextmanager
    def refused(path: Path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
        yield

    monkeypatch.setattr(listing, "locked", refused)
    assert listing.remove_run_dir(folder) is False
    assert capsys.readouterr() == ("", f"Kept {folder}: Permission denied\n")
    assert folder.is_dir()


@pytest.mark.parametrize("config, message", [
    ([1, 2], "config.json: not a JSON object"),
    ({"epochs": -1}, "config.json: epochs is not a whole number"),
    ({"epochs": "3"}, "config.json: epochs is not a whole number"),
    ({"epochs": 2.0}, "config.json: epochs is not a whole number"),
    ({"dataset": 3}, "config.json: dataset and model are not names"),
    ({"model": ["mlp"]}, "config.json: dataset and model are not names"),
    ({runs.RESOLVED_DATASET: None}, "config.json: dataset and model are not names"),
])
def test_read_config_names_what_is_wrong_with_the_file(tmp_path, config, message):
    (tmp_path / runs.CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(ValueError) as error:
        runs.read_config(tmp_path)
    assert str(error.value) == message


def test_read_config_takes_a_missing_file_or_fields_as_nothing_yet(tmp_path):
    assert runs.read_config(tmp_path) == {}
    config = {"epochs": 0, "dataset": "digits", "model": "mlp"}
    (tmp_path / runs.CONFIG_FILE).write_text(json.dumps(config))
    assert runs.read_config(tmp_path) == config


@pytest.mark.parametrize("text, message", [
    ("[]", "result.json: not a result jaxintro writes"),
    ('{"finished": "yes"}', "result.json: not a result jaxintro writes"),
    ('{"epochs": "3"}', "result.json: not a result jaxintro writes"),
    ('{"epochs": 3.0}', "result.json: not a result jaxintro writes"),
    ("{", "result.json: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
])
def test_read_result_names_what_is_wrong_with_the_file(tmp_path, text, message):
    (tmp_path / runs.RESULT_FILE).write_text(text)
    with pytest.raises(ValueError) as error:
        runs.read_result(tmp_path)
    assert str(error.value) == message


def test_read_result_reads_any_result_jaxintro_writes_even_a_long_one(tmp_path):
    """None before it is written; fields left out are fine; a sweep's result may pass config.json's 1 MiB bound."""
    assert runs.read_result(tmp_path) is None
    for result in ({}, {"finished": True, "epochs": 3}, {"epochs": 3, "members": ["x" * 100] * 20_000}):
        (tmp_path / runs.RESULT_FILE).write_text(json.dumps(result))
        assert runs.read_result(tmp_path) == result
    assert (tmp_path / runs.RESULT_FILE).stat().st_size > runs.MAX_RUN_FILE_BYTES


@pytest.mark.parametrize("config, kind", [
    ({}, {"kind": "single", "member_count": 1}),
    ({"seeds": 2}, {"kind": "seeds", "member_count": 2}),
    ({"lr_grid": [0.1], "seeds": 2}, {"kind": "sweep", "member_count": 2}),
    ({"lr_grid": [0.1, 0.01], "seeds": 3}, {"kind": "sweep", "member_count": 6}),
    ({"seeds": 2, "model": "a model no version has"}, {"kind": "seeds", "member_count": 2}),  # read from its members
])
def test_run_kind_is_one_model_seeds_or_a_sweep(config, kind):
    assert listing.run_kind(config, None) == {**kind, "diverged": 0, "test_accuracy": None}


def test_a_config_no_version_wrote_is_unreadable_with_the_reason():
    with pytest.raises(ConfigError) as refused:
        TrainConfig.from_json({"seeds": 0})
    with pytest.raises(ValueError) as error:
        listing.run_kind({"seeds": 0, "model": "a model no version has"}, None)
    assert str(error.value) == f"config.json: {refused.value}"


def test_the_epochs_done_without_a_checkpoint_are_the_last_rows(tmp_path):
    """No checkpoint committed (killed in a later epoch's save, say): the epochs metrics.jsonl holds, not 0."""
    (tmp_path / runs.CONFIG_FILE).write_text(json.dumps({"dataset": "digits", "epochs": 5}))
    rows = [{"epoch": epoch, "loss": 0.5, "train_accuracy": 0.9, "test_accuracy": 0.9} for epoch in (1, 2, 3)]
    (tmp_path / runs.METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    info = listing.describe_run(tmp_path)
    assert (info["epochs"], info["status"]) == (3, "empty (no checkpoint)")


@pytest.mark.parametrize("line, why", [
    ("[1]", "not a JSON object"),
    ("{}", "no epoch number"),
    ('{"epoch": -1}', "no epoch number"),
    ('{"epoch": "2"}', "no epoch number"),
    ('{"epoch": 2, "loss": "low"}', "a value that is not a number"),
    ('{"epoch": 2, "train_accuracy": [0.9]}', "a value that is not a number"),
    ('{"epoch": 2, "test_accuracy": true}', "a value that is not a number"),
    ('{"epoch": 2, "members": [0.9]}', "members that are not lists of numbers"),
    ('{"epoch": 2, "members": {"test_accuracy": 0.9}}', "members that are not lists of numbers"),
    ('{"epoch": 2, "members": {"test_accuracy": [0.9, "x"]}}', "members that are not lists of numbers"),
])
def test_a_row_jaxintro_never_writes_is_refused_naming_its_line(tmp_path, line, why):
    good = json.dumps({"epoch": 1, "loss": 0.5, "train_accuracy": None, "test_accuracy": 0.9})
    (tmp_path / runs.METRICS_FILE).write_text(f"{good}\n\n{line}\n")
    with pytest.raises(ValueError) as error:
        runs.read_metrics(tmp_path)
    assert str(error.value) == f"metrics.jsonl line 3: {why}"


def test_every_row_jaxintro_writes_is_read_even_from_a_long_file(tmp_path):
    """Epoch 0 (before training), missing and null values, members with diverged (null) values; past 1 MiB."""
    rows = [{"epoch": 0}, {"epoch": 1, "loss": None, "test_accuracy": 0.5},
            {"epoch": 2, "loss": 1, "members": {"test_accuracy": [0.9, None], "loss": [0.3, None]}}]
    rows += [{"epoch": epoch, "loss": 0.25, "note": "x" * 100} for epoch in range(3, 10_003)]
    (tmp_path / runs.METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert (tmp_path / runs.METRICS_FILE).stat().st_size > runs.MAX_RUN_FILE_BYTES
    assert runs.read_metrics(tmp_path) == rows


def test_a_line_that_is_not_json_is_named_with_the_reason(tmp_path):
    (tmp_path / runs.METRICS_FILE).write_text('{"epoch": 1}\n{"epoch": 2\n')
    with pytest.raises(ValueError) as error:
        runs.read_metrics(tmp_path)
    assert str(error.value) == "metrics.jsonl line 2: not JSON (Expecting ',' delimiter: line 1 column 12 (char 11))"
    with pytest.raises(ValueError) as error:  # too deep for Python's parser: the same one line
        jsonio.parse_json("[" * 100_000 + "]" * 100_000, "a.json")
    assert str(error.value) == ("a.json: not JSON (maximum recursion depth exceeded while decoding a JSON array "
                                "from a unicode string)")


def test_read_json_names_a_missing_file_and_a_broken_one(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        runs.read_json(tmp_path / "result.json")
    assert str(missing.value) == f"[Errno {errno.ENOENT}] {os.strerror(errno.ENOENT)}: '{tmp_path / 'result.json'}'"
    (tmp_path / "result.json").write_text("{")
    with pytest.raises(ValueError) as error:
        runs.read_json(tmp_path / "result.json")
    assert str(error.value) == ("result.json: not JSON (Expecting property name enclosed in double quotes: "
                                "line 1 column 2 (char 1))")
    (tmp_path / "result.json").write_text('{"epochs": 3}')
    assert runs.read_json(tmp_path / "result.json") == {"epochs": 3}


def test_asking_whether_a_claim_is_live_leaves_its_process_running(tmp_path, monkeypatch):
    """The probe is signal 0: it asks, and sends nothing (a process that takes SIGHUP's default dies of it)."""
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, "
                              "signal.SIG_DFL); print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    sent = []
    real_kill = os.kill

    def kill(pid: int, signum: int) -> None:
        sent.append((pid, signum))
        real_kill(pid, signum)

    monkeypatch.setattr(os, "kill", kill)
    try:
        child.stdout.readline()  # its handler is in place
        (tmp_path / runs.CLAIM_FILE).write_text(f"{child.pid} {socket.gethostname()}\n")
        assert claims.claim_is_live(tmp_path) is True
        assert sent == [(child.pid, 0)]  # asked, whatever the machine's speed
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
    finally:
        child.kill()
        child.wait(timeout=10)


def refusal(path: Path, **limit) -> str:
    with pytest.raises(ValueError) as raised:
        runs.read_run_file(path, **limit)
    return str(raised.value)


@pytest.mark.timeout(60)  # a FIFO opened for reading blocks for ever: a broken guard fails here, never hangs
def test_a_run_file_is_read_whole_or_refused_with_its_name_and_why(tmp_path):
    path = tmp_path / "config.json"
    assert runs.read_run_file(path) is None  # absent
    path.write_bytes(("é" * 617 + "x").encode())  # 1,235 bytes of UTF-8
    assert runs.read_run_file(path, limit=1235) == "é" * 617 + "x"  # exactly the limit: read whole
    assert refusal(path, limit=1234) == "config.json: larger than 1,234 bytes"
    path.write_bytes(b"\xff\xfe{}")
    assert refusal(path) == "config.json: not UTF-8 text"
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    assert refusal(path) == "config.json: a symbolic link"  # not followed, though its target is a fine file
    path.unlink()
    os.mkfifo(path)
    assert refusal(path) == "config.json: not a regular file"
    (tmp_path / "plain").write_text("")
    assert refusal(tmp_path / "plain" / "config.json") == f"config.json: {os.strerror(errno.ENOTDIR)}"
