"""A run folder from someone else: every file and link in it is hostile, everything outside it is the user's.

Each test is one way in that a run folder once gave (docs/reliability.md, "A run folder from someone else"):
the write rule (never through a link, never outside the folder, delete only what jaxintro wrote) and the
read rule (regular files only, bounded before reading), each seen from the command a learner runs.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jaxintro import listing, runs
from jaxintro.cli import main

DIGITS = ["--dataset", "digits", "--save-every", "0"]  # every epoch saved: these tests count checkpoints


def digest(folder: Path) -> dict[str, str]:
    """Every path under `folder` with what it is: a file's SHA-256, a link's target, a folder's mark."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[name] = "/"
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "special"
    return found


def copy_run(digits_run: Path, to: Path) -> Path:
    shutil.copytree(digits_run, to, symlinks=True)
    return to


# The child's peak is its VmHWM, read as it ends: wait4's ru_maxrss would not do, since a child forked from this
# test's process starts with this process's resident set (gigabytes, after the tests before it) as its maximum.
REPORTS_ITS_PEAK = """
import sys
from jaxintro import cli
code = cli.main(sys.argv[2:])
with open('/proc/self/status') as status, open(sys.argv[1], 'w') as peak:
    peak.write(next(line for line in status if line.startswith('VmHWM:')))
sys.exit(code)
"""
MEMORY_BOUND = 3 << 30  # a child's data segment: far above what a command needs, far below the machine's memory


def run_measured(argv: list[str], cwd: Path, *, stop_after_lines: int = 0, seconds: float = 120) -> tuple[int, str, int]:
    """`jaxintro ARGV` in a child: its exit code, what it printed, and its peak memory in MiB (its own VmHWM).

    The child's memory is bounded (RLIMIT_DATA: an unbounded read dies of MemoryError, not of the machine's memory)
    and so is its time (killed after `seconds`: a FIFO read blocks for ever); a server is stopped with SIGINT once
    it printed `stop_after_lines` lines.
    """
    out, peak = cwd / "out.txt", cwd / "peak.txt"
    peak.unlink(missing_ok=True)
    with open(out, "w+") as sink:
        child = subprocess.Popen([sys.executable, "-c", REPORTS_ITS_PEAK, str(peak), *argv], cwd=cwd, stdout=sink,
                                 stderr=subprocess.STDOUT)
        # Set from here (prlimit), not by a preexec_fn, whose fork in a process that runs JAX may deadlock: the
        # child is still starting Python, long before it reads a run folder.
        resource.prlimit(child.pid, resource.RLIMIT_DATA, (MEMORY_BOUND, MEMORY_BOUND))
        deadline, waited = time.monotonic() + seconds, (0, 0, None)
        while waited[0] == 0:
            waited = os.wait4(child.pid, os.WNOHANG)
            if waited[0] == 0 and time.monotonic() > deadline:
                child.kill()  # still blocked: the test fails on its exit code
                waited = os.wait4(child.pid, 0)
            elif waited[0] == 0 and stop_after_lines and out.read_text().count("\n") >= stop_after_lines:
                child.send_signal(signal.SIGINT)
                stop_after_lines = 0
            elif waited[0] == 0:
                time.sleep(0.1)
        child.returncode = os.waitstatus_to_exitcode(waited[1])
    kib = int(peak.read_text().split()[1]) if peak.exists() else 0  # none: killed, and the exit code says so
    return child.returncode, out.read_text(), kib // 1024


@pytest.fixture
def user_files(tmp_path) -> Path:
    """The learner's own files beside the run folders: a thesis and a shell start-up file."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("\\section{Introduction}\n")
    (home / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    return home


# ---------------------------------------------------------------- 1. a PNG written through a link


def test_evaluate_and_resume_never_write_a_plot_through_a_link(digits_run, tmp_path, user_files, capsys):
    before = digest(user_files)
    run = copy_run(digits_run, tmp_path / "shared")
    for name in (".confusion.tmp.png", ".curves.tmp.png", "confusion.png", "curves.png"):  # old and final names
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(user_files / "thesis.tex")
    assert main(["evaluate", str(run)]) == 0
    assert main(["train", "--resume", str(run), "--epochs", "4"]) == 0
    assert digest(user_files) == before
    assert (run / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (run / "curves.png").is_symlink()


# ---------------------------------------------------------------- 2. errors.log appended through a link


def test_a_failed_write_never_appends_its_log_through_a_link(digits_run, tmp_path, user_files, capsys):
    before = digest(user_files)
    run = copy_run(digits_run, tmp_path / "shared'$(cd;id>PWNED)")
    (run / runs.ERRORS_LOG).symlink_to(user_files / ".bashrc")
    (run / runs.CONFIG_FILE).unlink()
    (run / runs.CONFIG_FILE).mkdir()  # the write of config.json fails: a fault, whose records go to errors.log
    assert main(["train", "--resume", str(run), "--epochs", "4"]) == 74
    assert "could not write config.json" in capsys.readouterr().err
    assert digest(user_files) == before and not (tmp_path / "PWNED").exists()
    assert (run / runs.ERRORS_LOG).is_symlink()  # left as it was: neither followed nor replaced


def test_an_append_refuses_a_link_and_a_fifo_and_keeps_a_regular_file_whole(tmp_path, user_files):
    (tmp_path / "link").symlink_to(user_files / ".bashrc")
    with pytest.raises(OSError):
        runs.append_text(tmp_path / "link", "echo pwned\n")
    os.mkfifo(tmp_path / "fifo")
    reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # with a reader, opening it to write succeeds
    try:
        with pytest.raises(OSError, match="not a regular file"):
            runs.append_text(tmp_path / "fifo", "echo pwned\n")
    finally:
        os.close(reader)
    runs.append_text(tmp_path / "log", "one\n")
    runs.append_text(tmp_path / "log", "two\n")
    assert (tmp_path / "log").read_text() == "one\ntwo\n"
    assert (user_files / ".bashrc").read_text() == "export PATH=$HOME/bin:$PATH\n"


# ---------------------------------------------------------------- 3. train --run-dir deletes only its own


@pytest.mark.parametrize("layout", [
    {"checkpoints/checkpoint-500/pytorch_model.bin": b"weights", "config.json": b'{"architectures": ["Bert"]}'},
    {"model_best.pt": b"weights", "metrics.jsonl": b""},
    {"notes.txt": b"mine", runs.CLAIM_FILE: b"1 elsewhere\n"},
    {"config.json/": None},  # a folder where jaxintro's file would be
], ids=["hugging-face", "model-best", "notes-beside-a-claim", "config-is-a-folder"])
def test_train_run_dir_refuses_a_folder_holding_what_it_did_not_write(layout, tmp_path, capsys):
    folder = tmp_path / "mine"
    for name, data in layout.items():
        path = folder / name.rstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if data is None else path.write_bytes(data)
    before = digest(folder)
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "jaxintro did not write" in err and "nothing was changed" in err
    assert digest(folder) == before


def test_a_finished_run_whose_checkpoints_were_pruned_is_refused_whole(digits_run, tmp_path, capsys):
    run = copy_run(digits_run, tmp_path / "pruned")
    shutil.rmtree(run / runs.CHECKPOINT_DIR)  # pruned to save disk: the result is all that is left of it
    before = digest(run)
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(run)]) == 2
    assert "already holds a run" in capsys.readouterr().err and digest(run) == before


def test_the_debris_of_a_failed_start_is_removed_and_the_users_folder_kept(tmp_path, capsys):
    folder = tmp_path / "mine"
    (folder / runs.CHECKPOINT_DIR / "1.orbax-checkpoint-tmp-17").mkdir(parents=True)
    (folder / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 1}))
    (folder / ".config.json.k3j9x_2.tmp").write_text("{")  # a write the process died in
    (folder / runs.CLAIM_FILE).write_text("999999 elsewhere-once\n")  # another host's claim: live, refused
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(folder)]) == 2
    (folder / runs.CLAIM_FILE).unlink()
    bad = ["train", "--dataset", "mnist", "--data-dir", str(tmp_path / "nowhere"), "--epochs", "1"]
    assert main([*bad, "--run-dir", str(folder)]) == 2  # the debris went, then the run failed at its start
    assert folder.is_dir() and list(folder.iterdir()) == []


# ---------------------------------------------------------------- 4. runs --remove-unfinished


def test_remove_unfinished_keeps_every_folder_that_is_not_jaxintros(tmp_path, capsys):
    root = tmp_path / "runs"
    bert = root / "bert-finetuned"
    (bert / "checkpoint-500").mkdir(parents=True)
    (bert / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "epochs": 3}))
    (bert / "model.safetensors").write_bytes(b"weights")
    alone = root / "config-alone"  # another program's config.json, nothing else
    alone.mkdir()
    (alone / "config.json").write_text(json.dumps({"hidden_size": 768}))
    beside = root / "notes-beside"  # jaxintro's own config, and a file of the learner's beside it
    beside.mkdir()
    (beside / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 10}))
    (beside / "notes.txt").write_text("mine")
    ours = root / "ours"
    ours.mkdir()
    (ours / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 10}))
    before = {name: digest(root / name) for name in ("bert-finetuned", "config-alone", "notes-beside")}
    assert main(["runs", "--root", str(root), "--remove-unfinished", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"Keeping {bert}: not a jaxintro run: it holds checkpoint-500/, model.safetensors" in out
    assert f"Keeping {alone}: not a jaxintro run" in out and "Removed 1 folder." in out
    assert f"Keeping {beside}: not a jaxintro run: it holds notes.txt" in out
    assert {name: digest(root / name) for name in before} == before and not ours.exists()


def test_a_removal_leaves_a_folder_that_gained_a_file_meanwhile(tmp_path, monkeypatch):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 10}))
    real = runs.remove_own_files

    def and_then_a_file_appears(run_dir: Path) -> None:
        real(run_dir)
        (run_dir / "late.txt").write_text("mine")

    monkeypatch.setattr(listing, "remove_own_files", and_then_a_file_appears)
    assert not listing.remove_run_dir(folder)
    assert (folder / "late.txt").read_text() == "mine"


def test_removing_jaxintros_files_leaves_every_other_one(tmp_path):
    """The delete rule alone, on a folder that holds both: only jaxintro's names and step folders go."""
    folder = tmp_path / "r"
    (folder / runs.CHECKPOINT_DIR / "2.orbax-checkpoint-tmp-9").mkdir(parents=True)
    (folder / runs.CHECKPOINT_DIR / "checkpoint-500").mkdir()
    for name in (runs.CLAIM_FILE, runs.CONFIG_FILE, "curves.png", ".result.json.abc_12.tmp", "model_best.pt"):
        (folder / name).write_text("x")
    (folder / "notes").mkdir()
    runs.remove_own_files(folder)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "checkpoints", "checkpoints/checkpoint-500", "model_best.pt", "notes"]


# ---------------------------------------------------------------- 5. a checkpoints link to another run


def test_resume_through_a_checkpoints_link_is_refused_and_the_other_run_kept(digits_run, tmp_path, capsys):
    own = copy_run(digits_run, tmp_path / "own")
    hz = tmp_path / "hz"
    hz.mkdir()
    for name in (runs.CONFIG_FILE, runs.METRICS_FILE):
        shutil.copy(own / name, hz / name)
    (hz / runs.CHECKPOINT_DIR).symlink_to("../own/checkpoints")
    before = digest(own)
    assert main(["train", "--resume", str(hz), "--epochs", "6"]) == 2
    err = capsys.readouterr().err
    assert f"{hz / runs.CHECKPOINT_DIR} is a symbolic link, not a folder of checkpoints" in err
    assert digest(own) == before
    for argv in (["evaluate", str(hz)], ["predict", str(hz), str(tmp_path / "none.png")]):
        assert main(argv) == 2 and "symbolic link" in capsys.readouterr().err


def newest_meta(run: Path) -> Path:
    return run / runs.CHECKPOINT_DIR / str(max(runs.committed_epochs(run))) / "meta" / "metadata"


@pytest.mark.parametrize("trick, refusal", [
    ("link to /dev/zero", "is a symbolic link; jaxintro reads no link or special file"),  # read whole: never ends
    ("fifo", "is not a regular file; jaxintro reads no link"),  # opened for reading: blocks for ever
    ("sparse and oversized", "is larger than"),  # no disk used, but a whole read would take it all
])
def test_a_checkpoint_file_orbax_must_not_read_is_refused_before_it_is_read(trick, refusal, digits_run, tmp_path):
    run = copy_run(digits_run, tmp_path / "r")
    meta = newest_meta(run)
    if trick == "sparse and oversized":
        os.truncate(meta, runs.MAX_METRICS_BYTES + 1)
    else:
        meta.unlink()
        meta.symlink_to("/dev/zero") if trick.startswith("link") else os.mkfifo(meta)
    code, printed, _peak = run_measured(["evaluate", str(run)], tmp_path, seconds=60)
    assert code == 2 and f"{meta} {refusal}" in printed, printed[-2000:]


# ---------------------------------------------------------------- 9. a step folder named `²`


def test_a_step_folder_whose_name_is_not_ascii_digits_is_no_checkpoint_and_no_traceback(tmp_path, capsys):
    folder = tmp_path / "r"
    (folder / runs.CHECKPOINT_DIR / "²").mkdir(parents=True)  # str.isdigit() takes it, int() does not
    (folder / runs.CHECKPOINT_DIR / "3").mkdir()
    assert runs.committed_epochs(folder) == [3]
    assert main(["train", *DIGITS, "--epochs", "1", "--run-dir", str(folder)]) == 2
    assert "checkpoints/²/" in capsys.readouterr().err


# ---------------------------------------------------------------- 6. unbounded reads


def set_meta(run: Path, change) -> None:
    """Change every step's meta (Orbax's JSON) as a crafted folder would."""
    for step in runs.committed_epochs(run):
        path = run / runs.CHECKPOINT_DIR / str(step) / "meta" / "metadata"
        meta = json.loads(path.read_text())
        change(meta)
        path.write_text(json.dumps(meta))


def test_a_data_folder_named_by_a_run_is_read_bounded_before_it_verifies(mnist_run, tmp_path):
    hostile = tmp_path / "Downloads" / "classmate" / "data"
    hostile.mkdir(parents=True)
    (hostile / "train-images-idx3-ubyte.gz").symlink_to("/dev/zero")
    os.mkfifo(hostile / "train-labels-idx1-ubyte.gz")
    (hostile / "t10k-images-idx3-ubyte").symlink_to("/dev/zero")
    os.mkfifo(hostile / "t10k-labels-idx1-ubyte")
    run = copy_run(mnist_run, tmp_path / "classmate-run")
    set_meta(run, lambda meta: meta["config"].update(data_dir=str(hostile)))
    code, printed, _peak = run_measured(["evaluate", str(run)], tmp_path, seconds=60)
    assert code == 2 and "not a regular file" in printed, printed[-2000:]


def test_a_gzip_bomb_is_refused_while_it_is_decompressed(tmp_path):
    """A bomb that inflates to four times the cap: refused with at most the cap (and a little) in memory."""
    import gzip
    import io
    import tracemalloc

    from jaxintro.idx import MAX_IDX_BYTES, decompress_if_gzip
    from jaxintro.errors import DataError

    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb") as bomb:
        for _chunk in range(4 * MAX_IDX_BYTES >> 20):
            bomb.write(bytes(1 << 20))  # 256 MiB of zeros in all, about 250 KB packed
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="decompresses to more than"):
            decompress_if_gzip(packed.getvalue(), "bomb.gz")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_IDX_BYTES  # the whole bomb would be 4 times the cap


def test_a_bounded_read_takes_at_most_its_limit_of_a_larger_file(tmp_path):
    import tracemalloc

    big = tmp_path / "big"
    with open(big, "wb") as sparse:
        sparse.truncate(512 << 20)  # no disk used
    tracemalloc.start()
    try:
        with pytest.raises(OSError, match="larger than 1,048,576 bytes"):
            runs.read_bounded(big, 1 << 20)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # a whole read would be 512 MiB


def test_an_oversized_metrics_file_is_unreadable_at_once(tmp_path, capsys):
    root = tmp_path / "runs"
    (root / "big").mkdir(parents=True)
    (root / "big" / runs.CONFIG_FILE).write_text(json.dumps({"model": "jax", "epochs": 10}))
    with open(root / "big" / runs.METRICS_FILE, "wb") as out:
        out.truncate(runs.MAX_METRICS_BYTES + 1)  # sparse: the cap refuses it after one bounded read
    assert main(["runs", "--root", str(root), "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["status"] == "unreadable" and "larger than" in listed["reason"]


def test_serve_reads_an_unchanged_run_folder_once(digits_run, tmp_path, monkeypatch):
    from jaxintro import serve

    run = copy_run(digits_run, tmp_path / "r")
    app = serve.load_app(run)
    reads = []
    real = serve.read_metrics
    monkeypatch.setattr(serve, "read_metrics", lambda run_dir: reads.append(run_dir) or real(run_dir))
    first = app.metrics()
    assert [app.metrics() for _ in range(5)] == [first] * 5 and len(reads) == 1
    runs.write_metrics(run, runs.read_metrics(run)[:1])  # the file changed: read again
    assert len(app.metrics()["rows"]) == 1 and len(reads) == 2


# ---------------------------------------------------------------- 7. terminal escapes


OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes the clipboard in kitty, iTerm2, WezTerm, Windows Terminal
BIDI = "\u202e"


def test_nothing_a_run_folder_holds_reaches_the_terminal_raw(digits_run, tmp_path, capsys):
    run = copy_run(digits_run, tmp_path / f"run{OSC52}")
    image = tmp_path / "digit.png"
    from PIL import Image

    pixels = Image.new("L", (8, 8), 255)
    pixels.paste(0, (3, 1, 5, 7))  # a dark stroke on light paper: a one
    pixels.save(image)
    for argv in (["evaluate", str(run)], ["predict", str(run), str(image)],
                 ["train", "--resume", str(run), "--epochs", "4"], ["runs", "--root", str(tmp_path)]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err, argv
        assert argv[0] == "predict" or "run\\x1b]52;c;cHduZWQ=\\x07" in out, argv  # predict names the image
    set_meta(run, lambda meta: meta.update(jaxintro_version=f"9{OSC52}{BIDI}"))
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "written by jaxintro 9\\x1b]52" in err and "\\u202e" in err and "\x1b" not in err and BIDI not in err


def test_serve_prints_a_folder_name_escaped(digits_run, tmp_path):
    root = tmp_path / "runs"
    copy_run(digits_run, root / f"run{OSC52}")
    child = subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "serve", "--port", "0"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    try:
        lines = [child.stdout.readline(), child.stdout.readline()]  # which run, then where it is served
    finally:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    shown = "".join(lines) + out + err
    assert "run\\x1b]52;c;cHduZWQ=\\x07" in lines[0] and "Serving runs/run\\x1b]52" in lines[1]
    assert "\x1b" not in shown and "\x07" not in shown


# ---------------------------------------------------------------- 8. which run `serve` picks


def test_the_newest_run_is_this_machines_by_its_recorded_time_never_a_future_one(digits_run, tmp_path):
    import datetime as dt

    root = tmp_path / "runs"
    now = dt.datetime(2026, 12, 6, 12, tzinfo=dt.timezone.utc)
    runs_made = {"mine-old": ("2026-12-01T10:00:00+00:00", True), "mine-new": ("2026-12-05T10:00:00+00:00", True),
                 "classmate-2099": ("2099-01-01T00:00:00+00:00", False),
                 "classmate-recent": ("2026-12-06T11:00:00+00:00", False)}
    for name, (written, here) in runs_made.items():
        run = copy_run(digits_run, root / name)
        result = json.loads((run / runs.RESULT_FILE).read_text())
        (run / runs.RESULT_FILE).write_text(json.dumps({**result, "written_at": written}))
        os.utime(run / runs.RESULT_FILE, (4_070_908_800, 4_070_908_800))  # 2099: a zip keeps such times
        if not here:
            (run / runs.CLAIM_FILE).write_text("4242 a-classmates-laptop\n")
    assert listing.newest_finished_run(root, now=now) == root / "mine-new"
    shutil.rmtree(root / "mine-old"), shutil.rmtree(root / "mine-new")
    assert listing.newest_finished_run(root, now=now) == root / "classmate-recent"  # none of this machine's


# ---------------------------------------------------------------- the meta of a checkpoint is input too


@pytest.mark.parametrize("change, message", [
    (lambda meta: meta.update(metrics=[{"epoch": "x"}]), "metrics are not epoch records"),
    (lambda meta: meta["config"].update(data_dir=5), "--data-dir must be a folder's path; got 5"),
    (lambda meta: meta["config"].update(hidden=[1] * 100_000), "--hidden takes at most 64 layers; got 100000"),
    (lambda meta: meta["config"].update(record_grad_norm="false"),
     "--record-grad-norm must be true or false (a JSON boolean); got 'false'"),
], ids=["rows", "data-dir", "layers", "switch"])
def test_a_crafted_meta_is_one_line_not_a_traceback(change, message, digits_run, tmp_path, capsys):
    run = copy_run(digits_run, tmp_path / "r")
    set_meta(run, change)
    assert main(["evaluate", str(run)]) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- 12. a checkpoint that declares more than the machine has

CHUNK = 2048  # a crafted array's chunk edge: 16 MiB of zeros that zstd keeps in a few hundred bytes


def state_store(step: Path):
    """A step's state as TensorStore's key-value store (Orbax's OCDBT database: one key per array file)."""
    import tensorstore as ts

    return {"driver": "ocdbt", "base": f"file://{step / 'state'}/"}, ts.KvStore.open(
        {"driver": "ocdbt", "base": f"file://{step / 'state'}/"}).result()


def declare_widths(run: Path, hidden: list[int]) -> None:
    """Every step of `run` made to hold an MLP of widths `hidden`, all zeros, as a crafted folder would: its config
    says so, and each array is one compressed chunk of zeros written once and stored again at every place of the
    chunk grid, so that a checkpoint of a few MB declares gigabytes."""
    import numpy as np
    import tensorstore as ts

    config = json.loads((run / runs.CONFIG_FILE).read_text())
    (run / runs.CONFIG_FILE).write_text(json.dumps({**config, "hidden": hidden}))
    set_meta(run, lambda meta: meta["config"].update(hidden=hidden))
    for step in runs.committed_epochs(run):
        spec, kv = state_store(run / runs.CHECKPOINT_DIR / str(step))
        for key in [k.decode() for k in kv.list().result() if k.endswith(b"/.zarray") and b".layer" in k]:
            name = key.removesuffix("/.zarray")
            layer, old = int(name.split(".layer")[1].split(".")[0]), json.loads(kv.read(key).result().value)["shape"]
            fan_out = hidden[layer - 1] if layer <= len(hidden) else old[-1]
            shape = [old[0] if layer == 1 else hidden[layer - 2], fan_out] if name.endswith(".w") else [fan_out]
            kv.delete_range(ts.KvStore.KeyRange(name + "/", name + "0")).result()
            chunk = [min(CHUNK, n) for n in shape]
            array = ts.open({"driver": "zarr", "kvstore": {**spec, "path": name + "/"}, "create": True, "metadata": {
                "shape": shape, "chunks": chunk, "dtype": "<f4", "compressor": {"id": "zstd", "level": 1},
                "fill_value": None}}).result()
            array[tuple(slice(0, n) for n in chunk)].write(np.zeros(chunk, np.float32)).result()
            zero = kv.read(name + "/" + ".".join("0" for _ in shape)).result().value
            for index in np.ndindex(*[-(-n // CHUNK) for n in shape]):
                kv.write(name + "/" + ".".join(map(str, index)), zero).result()


def digit_image(where: Path) -> Path:
    from PIL import Image

    pixels = Image.new("L", (8, 8), 255)
    pixels.paste(0, (3, 1, 5, 7))
    pixels.save(where)
    return where


@pytest.mark.parametrize("command", ["evaluate", "predict", "serve"])
def test_a_checkpoint_that_declares_more_than_the_machine_has_is_refused_before_a_read(command, digits_run, tmp_path,
                                                                                        monkeypatch, capsys):
    from jaxintro import evaluate

    run = copy_run(digits_run, tmp_path / "classmate")
    declare_widths(run, [16384, 16384])  # 270 M parameters a copy, in 1.5 MB of files a step
    assert sum(f.stat().st_size for f in run.rglob("*") if f.is_file()) < 8 << 20
    monkeypatch.setattr("jaxintro.memory.available_memory_bytes", lambda: 2 << 30)  # a machine of 2 GiB free
    monkeypatch.setattr(evaluate, "restore", lambda *a, **k: pytest.fail("an array was about to be read"))
    extra = {"evaluate": [], "predict": [str(digit_image(tmp_path / "d.png"))], "serve": ["--port", "0"]}[command]
    assert main([command, str(run), *extra]) == 2
    err = capsys.readouterr().err
    assert "sizes 64,16384,16384,10" in err and "needs about 2.3 GiB to use" in err and "nothing of it was read" in err


def test_a_data_limit_is_memory_a_command_cannot_take():
    child = ("import resource; resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30)); "
             "from jaxintro.memory import host_memory_bytes; print(host_memory_bytes())")
    free = int(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
    assert 0 < free < 2 << 30  # `ulimit -d`, as the archive test's commands run, less what the interpreter holds


def test_a_chunk_declared_larger_than_its_array_is_refused_before_a_read(digits_run, tmp_path, capsys):
    run = copy_run(digits_run, tmp_path / "classmate")
    for step in runs.committed_epochs(run):
        _spec, kv = state_store(run / runs.CHECKPOINT_DIR / str(step))
        zarray = json.loads(kv.read("params.layer1.w/.zarray").result().value)
        kv.write("params.layer1.w/.zarray", json.dumps({**zarray, "chunks": [1 << 20, 1 << 20]}).encode()).result()
    assert main(["evaluate", str(run)]) == 2  # reading it would allocate a chunk of 4 TiB
    assert "params.layer1.w is stored as [64, 256] in chunks of [1048576, 1048576]" in capsys.readouterr().err


def test_a_command_that_only_predicts_never_reads_the_optimizer_state(digits_run, tmp_path, capsys):
    import tensorstore as ts

    run = copy_run(digits_run, tmp_path / "r")
    for step in runs.committed_epochs(run):  # Adam's moments' data gone: only a resume needs them
        _spec, kv = state_store(run / runs.CHECKPOINT_DIR / str(step))
        for key in [k.decode() for k in kv.list().result() if k.startswith(b"opt_state.0.mu.") and b"/.z" not in k]:
            kv.delete_range(ts.KvStore.KeyRange(key, key + "\x00")).result()
    assert main(["evaluate", str(run)]) == 0
    assert main(["predict", str(run), str(digit_image(tmp_path / "d.png"))]) == 0
    assert main(["train", "--resume", str(run), "--epochs", "4"]) == 2
    assert "no checkpoint could be restored" in capsys.readouterr().err


# ---------------------------------------------------------------- 13. checkpoints/ swapped for a link while a run trains


def victims_steps(tmp_path: Path) -> Path:
    """Another folder of steps (a classmate's checkpoints), which Orbax's pruning would delete if it were followed."""
    victim = tmp_path / "victim"
    for step in ("1", "2"):
        (victim / step).mkdir(parents=True)
        (victim / step / "weights.bin").write_bytes(b"not yours to delete")
    return victim


def test_a_checkpoints_folder_swapped_for_a_link_while_training_is_never_written_through(tmp_path, monkeypatch,
                                                                                         capsys):
    from jaxintro import checkpoint

    run, victim, moved = tmp_path / "shared-run", victims_steps(tmp_path), tmp_path / "moved-away"
    before, save = digest(victim), checkpoint.Checkpointer.save

    def swapping_save(self, state, *args, **kwargs):
        if state.epoch == 3:  # two steps on disk, the second perhaps still being written: the swap
            os.rename(run / runs.CHECKPOINT_DIR, moved)
            (run / runs.CHECKPOINT_DIR).symlink_to(victim)
        return save(self, state, *args, **kwargs)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", swapping_save)
    code = main(["train", *DIGITS, "--epochs", "8", "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 74 and "checkpoints/ changed while the run trained (it was replaced by a symbolic link)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert digest(victim) == before  # nothing written there, nothing of it pruned
    assert sorted(os.listdir(moved)) == ["1", "2"]  # the run's last good steps, kept where they were moved


def test_a_removal_deletes_through_the_folder_it_opened_never_through_a_link_put_there_after(tmp_path, monkeypatch):
    run, victim, moved = tmp_path / "run", victims_steps(tmp_path), tmp_path / "moved-away"
    for step in ("1", "2"):
        (run / runs.CHECKPOINT_DIR / step).mkdir(parents=True)
    before, remove_steps = digest(victim), runs.PinnedFolder.remove_steps

    def swapped_then_removed(self, chosen):
        os.rename(run / runs.CHECKPOINT_DIR, moved)  # between the check and the deletion
        (run / runs.CHECKPOINT_DIR).symlink_to(victim)
        return remove_steps(self, chosen)

    monkeypatch.setattr(runs.PinnedFolder, "remove_steps", swapped_then_removed)
    runs.remove_own_files(run)
    assert digest(victim) == before and os.listdir(moved) == []  # the folder it opened emptied, the other kept


# ---------------------------------------------------------------- 10. a number no run holds


def edit_json(name: str, change):
    """A change to the run file `name`, made on its text: `change(text) -> text`."""
    def edit(run: Path) -> None:
        (run / name).write_text(change((run / name).read_text()))
    return edit


def a_number(field: str, value: str):
    """`"field": <its value>` replaced by `"field": value`, on the JSON text itself (json.dumps writes no such value)."""
    return lambda text: re.sub(rf'"{field}": [^,}}]+', f'"{field}": {value}', text, count=1)


HOSTILE_NUMBERS = {
    "a 400-digit loss": (edit_json(runs.METRICS_FILE, a_number("loss", "9" * 400)), "unreadable"),
    "a 400-digit seed count": (edit_json(runs.CONFIG_FILE, a_number("seeds", "9" * 400)), "unreadable"),
    "members null": (edit_json(runs.METRICS_FILE, lambda text: text.rstrip()[:-1] + ', "members": null}\n'), "unreadable"),
    "NaN accuracy": (edit_json(runs.METRICS_FILE, a_number("test_accuracy", "NaN")), "finished"),
    "Infinity in the result": (edit_json(runs.RESULT_FILE, a_number("final_loss", "-Infinity")), "finished"),
    "1e999 in the result": (edit_json(runs.RESULT_FILE, a_number("test_accuracy", "1e999")), "finished"),
}


@pytest.mark.parametrize("trick", HOSTILE_NUMBERS, ids=list(HOSTILE_NUMBERS))
def test_one_folder_with_a_number_no_run_holds_breaks_no_listing(trick, digits_run, tmp_path, capsys):
    change, status = HOSTILE_NUMBERS[trick]
    root = tmp_path / "runs"
    copy_run(digits_run, root / "mine")
    change(copy_run(digits_run, root / "classmate"))
    assert main(["runs", "--root", str(root)]) == 0
    assert main(["runs", "--root", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.splitlines()[-1], parse_constant=lambda name: pytest.fail(name))
    assert {row["run_dir"]: row["status"] for row in listed} == {str(root / "mine"): "finished",
                                                                  str(root / "classmate"): status}
    assert main(["runs", "--root", str(root), "--remove-unfinished", "--yes"]) == 0
    finished = [root / "mine"] + ([root / "classmate"] if status == "finished" else [])
    assert listing.newest_finished_run(root) in finished  # serve's choice, with no RUN_DIR: no traceback either


def test_a_result_dated_past_the_year_9999_breaks_no_listing(digits_run, tmp_path, capsys):
    # ext4 keeps no time past 2446; tmpfs (and btrfs, XFS with bigtime) keep the year 33658 a zip can carry.
    where = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.path.isdir("/dev/shm") else tmp_path
    try:
        root = where / "runs"
        copy_run(digits_run, root / "mine")
        run = copy_run(digits_run, root / "classmate")
        result = json.loads((run / runs.RESULT_FILE).read_text())
        result.pop("written_at")  # an older version's result: its file's time is read instead
        (run / runs.RESULT_FILE).write_text(json.dumps(result))
        os.utime(run / runs.RESULT_FILE, (10**12, 10**12))  # the year 33658, past what a datetime holds
        if (run / runs.RESULT_FILE).stat().st_mtime != 10**12:
            pytest.skip("no filesystem here keeps a time past the year 2446")
        assert listing.newest_finished_run(root) == root / "mine"  # a time still to come never makes the newest
        assert main(["runs", "--root", str(root)]) == 0 and "classmate" in capsys.readouterr().out
    finally:
        if where != tmp_path:
            shutil.rmtree(where)


# ---------------------------------------------------------------- 11. evaluate, where its plot cannot be written


def no_space_left(monkeypatch) -> None:
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr("jaxintro.plots.write_atomic", full)


@pytest.mark.parametrize("block", ["a folder named confusion.png", "a full disk"])
def test_evaluate_prints_its_numbers_where_its_plot_cannot_be_written(block, digits_run, tmp_path, monkeypatch,
                                                                       capsys):
    run = copy_run(digits_run, tmp_path / "classmate")
    (run / "confusion.png").unlink(missing_ok=True)
    if block == "a full disk":
        no_space_left(monkeypatch)
    else:
        (run / "confusion.png").mkdir()
    assert main(["evaluate", str(run), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out.splitlines()[-1])
    assert report["confusion_png"] is None and 0.5 < report["test_accuracy"] <= 1
    assert "Test accuracy:" in out and "Traceback" not in err
    assert err.strip().startswith("Confusion matrix not written to") and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------- every trick at once


def hostile_archive(digits_run: Path, where: Path, name: str) -> Path:
    """A classmate's four runs, archived with every trick above (tar keeps links and FIFOs, as `unzip` does links).

    `NAME-reads` holds what must never be read (a link to /dev/zero, a FIFO, a step named `²`, a crafted version,
    a result dated 2099); `NAME-writes` is a sound run whose plots and log are links to the learner's files and
    which holds a file jaxintro never writes, so the commands that read it go on to write; `NAME-huge` declares
    a model no machine of ours holds, in a few MB; `NAME-numbers` holds every number no run holds (a 400-digit
    integer, `"members": null`, NaN, infinities).
    """
    import datetime as dt
    import tarfile

    reads, writes, huge, numbers = (copy_run(digits_run, where / "build" / f"{name}-{kind}")
                                    for kind in ("reads", "writes", "huge", "numbers"))
    declare_widths(huge, [16384, 16384])  # 270 M parameters in 4 MB: more than a command's 3 GiB may take below
    for change in HOSTILE_NUMBERS.values():  # every number no run holds, in one folder (the listing's tricks)
        change[0](numbers)
    for run in (reads, writes):
        for plot in (".confusion.tmp.png", ".curves.tmp.png", "confusion.png", "curves.png"):
            (run / plot).unlink(missing_ok=True)
            (run / plot).symlink_to("../../sibling/thesis.tex")
        (run / runs.ERRORS_LOG).symlink_to("../../sibling/.bashrc")
        (run / "model_best.pt").write_bytes(b"not ours")
    for run in (reads, writes, huge, numbers):
        (run / runs.CLAIM_FILE).write_text("4242 a-classmates-laptop\n")  # claimed on the machine it was trained on
    steps = runs.committed_epochs(reads)
    (reads / runs.CHECKPOINT_DIR / "²").mkdir()
    set_meta(reads, lambda meta: meta.update(jaxintro_version=f"0.1.0{OSC52}{BIDI}"))
    newest = reads / runs.CHECKPOINT_DIR / str(steps[-1])
    (newest / "meta" / "metadata").unlink()
    (newest / "meta" / "metadata").symlink_to("/dev/zero")
    os.mkfifo(reads / runs.CHECKPOINT_DIR / str(steps[0]) / "state" / "_sharding.fifo")
    result = json.loads((reads / runs.RESULT_FILE).read_text())
    (reads / runs.RESULT_FILE).write_text(json.dumps({**result, "written_at": dt.datetime(2099, 1, 1).isoformat()}))
    os.utime(reads / runs.RESULT_FILE, (4_070_908_800, 4_070_908_800))
    archive = where / "classmate.tar"
    with tarfile.open(archive, "w") as tar:
        for run in (reads, writes, huge, numbers):
            tar.add(run, arcname=run.name)
    return archive


@pytest.mark.timeout(600)
def test_a_hostile_archive_meets_every_command_and_changes_nothing_outside_itself(digits_run, tmp_path):
    import tarfile

    from PIL import Image

    name = f"classmate{OSC52}"
    archive = hostile_archive(digits_run, tmp_path, name)
    home = tmp_path / "home"
    (home / "sibling").mkdir(parents=True)
    (home / "sibling" / "thesis.tex").write_text("\\section{Introduction}\n")
    (home / "sibling" / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    copy_run(digits_run, home / "runs" / "mine")  # the learner's own run, claimed here
    with tarfile.open(archive) as tar:
        tar.extractall(home / "runs", filter="fully_trusted")  # links and FIFOs as unzip would make them
    reads, writes, huge = (home / "runs" / f"{name}-{kind}" for kind in ("reads", "writes", "huge"))
    sibling, before, reads_before = home / "sibling", digest(home / "sibling"), digest(reads)
    image = tmp_path / "digit.png"
    pixels = Image.new("L", (8, 8), 255)
    pixels.paste(0, (3, 1, 5, 7))
    pixels.save(image)
    commands = [(["runs"], 0), (["runs", "--json"], 0), (["runs", "--remove-unfinished", "--yes"], 0)]
    for run, code in ((reads, 2), (writes, 0), (huge, 2)):  # the sound run is used and resumed: its plots written
        commands += [(["evaluate", str(run)], code), (["predict", str(run), str(image)], code),
                     (["train", "--resume", str(run), "--epochs", "4"], code),
                     (["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)], 2)]
    commands += [(["serve", str(reads), "--port", "0"], 2), (["serve", str(huge), "--port", "0"], 2)]
    for argv, code in commands:
        returned, printed, peak_mib = run_measured(argv, home)
        assert returned == code, (argv, printed[-2000:])
        assert "Traceback" not in printed and "\x1b" not in printed and "\x07" not in printed, (argv, printed)
        assert 0 < peak_mib < 1024, (argv, peak_mib)
    returned, printed, peak_mib = run_measured(["serve", "--port", "0"], home, stop_after_lines=2)
    assert "serving runs/mine, the newest finished run" in printed and 0 < peak_mib < 1024
    assert digest(sibling) == before  # no byte of the learner's changed
    assert digest(reads) == reads_before  # nothing of it followed, nothing of it removed
    assert (writes / "model_best.pt").read_bytes() == b"not ours" and not (writes / "curves.png").is_symlink()
