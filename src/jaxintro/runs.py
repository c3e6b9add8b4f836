"""Run folders: claimed atomically, written atomically, so two runs never share one and nothing is half-written."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import math
import os
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.faults import ERRORS_LOG, committed_epochs, run_write, watch
from jaxintro.grid import diverged_in, headline_accuracy
from jaxintro.i18n import N_, _, ngettext, printable

CONFIG_FILE = "config.json"
RESOLVED_DATASET = "resolved_dataset"  # written into config.json beside the config: the dataset `auto` became
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
CHECKPOINT_DIR = "checkpoints"  # Orbax's steps, one folder each (written by `jaxintro.checkpoint`)
# A run folder may come from someone else (a classmate's, a download): its files are input, read with a cap.
MAX_RUN_FILE_BYTES = 1 << 20  # config.json and the claim: a few hundred bytes each
# metrics.jsonl and result.json grow with the members: about 120 bytes per member and epoch, 230 per member.
MAX_METRICS_BYTES = 256 << 20
MAX_RESULT_BYTES = 64 << 20


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync, then rename over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Atomically write `obj` as indented JSON (NaN and infinities as null: every JSON file jaxintro writes is JSON)."""
    write_atomic(path, json.dumps(json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def json_safe(value: Any) -> Any:
    """`value` as JSON can hold it: NaN and infinities (a row that did not run, a member that diverged) become null.

    `json.dumps` would write a bare `NaN`, which is not JSON.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def read_run_file(path: Path, limit: int = MAX_RUN_FILE_BYTES) -> str | None:
    """A text file of a run folder (None: absent), or a ValueError that says why not; never a hang.

    Regular files only, not followed through a link (a FIFO would block, a link to /dev/zero never end),
    and at most `limit` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = _("a symbolic link") if exc.errno == errno.ELOOP else exc.strerror
        raise ValueError(_("{name}: {why}").format(name=path.name, why=why)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(_("{name}: not a regular file").format(name=path.name))
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(_("{name}: larger than {limit:,} bytes").format(name=path.name, limit=limit))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(_("{name}: not UTF-8 text").format(name=path.name)) from None


def parse_json(text: str, name: str) -> Any:
    """`text` as JSON, or a ValueError naming the file (deep nesting included)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(_("{name}: not JSON ({error})").format(name=name, error=str(exc)[:100])) from None


def read_json(path: Path) -> Any:
    """Read a JSON file of a run folder (FileNotFoundError when absent; ValueError when unreadable)."""
    text = read_run_file(path)
    if text is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    return parse_json(text, path.name)


def write_metrics(run_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Rewrite `metrics.jsonl` with one JSON object per epoch (atomic, so a resume never sees half a line)."""
    with run_write(METRICS_FILE, run_dir):
        write_atomic(run_dir / METRICS_FILE, "".join(json.dumps(json_safe(row), sort_keys=True, allow_nan=False) + "\n"
                                                     for row in rows))


CLAIM_FILE = ".claimed"


def claim_run_dir(run_dir: str | os.PathLike | None, root: Path = Path("runs")) -> Path:
    """Create and claim a fresh run folder; `None` means `runs/<timestamp>`.

    The claim is `mkdir` of a folder that must not exist yet, or, for a folder given by the user, an
    exclusively created marker holding this process's id. A folder whose earlier run never wrote a
    checkpoint (it failed to start, or was killed in its first epoch) is free again, unless the
    process that claimed it is still alive: two runs started at once never share a folder.
    """
    if run_dir is None:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(_("cannot create the runs folder {folder}: {reason}; pass --run-dir DIR").format(
                folder=root, reason=exc.strerror)) from None
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        for attempt in range(1000):
            path = root / (stamp if attempt == 0 else f"{stamp}-{attempt}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            _write_claim(path / CLAIM_FILE)
            return path
        raise ConfigError(_("could not claim a new run folder under {folder}; pass --run-dir DIR").format(folder=root))
    path = Path(run_dir)
    taken = _("--run-dir {path} already holds a run; choose another folder, continue it with --resume {path}, "
              "or see `jaxintro runs`").format(path=path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with _locked(path):  # two claims of one folder run one after the other, never interleaved
            if not has_checkpoint(path) and not claim_is_live(path):
                release_run_dir(path)  # the debris of a run that never wrote a checkpoint
            _write_claim(path / CLAIM_FILE)
    except FileExistsError:
        raise ConfigError(taken) from None
    except OSError as exc:  # the folder cannot be made or locked: the user's choice of folder, not a fault mid-run
        raise ConfigError(_("--run-dir {path} is not writable ({reason}); choose another folder").format(
            path=path, reason=exc.strerror)) from None
    if has_checkpoint(path) or (path / RESULT_FILE).exists():
        (path / CLAIM_FILE).unlink()
        raise ConfigError(taken)
    return path


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_claim(marker: Path) -> None:
    watch(marker.parent)  # the run's folder from now on: its later writes check that it is still there
    with run_write(_("the claim of the run folder"), marker.parent):
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(f"{os.getpid()} {socket.gethostname()}\n")
        except OSError:
            marker.unlink(missing_ok=True)  # a full disk: no half-written claim is left to puzzle a later run
            raise


def claim_is_live(run_dir: Path) -> bool:
    """Whether the process that claimed `run_dir` still runs (on this host; another host's claim counts as live)."""
    try:
        pid_text, _space, host = (read_run_file(run_dir / CLAIM_FILE, 4096) or "").strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False  # no marker, or one from an older version: nobody holds it
    if host and host != socket.gethostname():
        return True
    if not 0 < pid < 1 << 22:  # pid 0 or -1 would signal a process group or every process: no claim names them
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def has_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir/checkpoints/` holds a finished step (Orbax renames a step's folder only when complete)."""
    return bool(committed_epochs(run_dir))


def release_run_dir(run_dir: Path) -> None:
    """Remove what a run wrote before its first checkpoint (its claim, config, partial files): the folder is free."""
    import shutil

    for name in (CLAIM_FILE, CONFIG_FILE, METRICS_FILE, RESULT_FILE, "curves.png", ERRORS_LOG):
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / CHECKPOINT_DIR, ignore_errors=True)


def discard_run_dir(run_dir: Path, *, created: bool) -> None:
    """After a failed start: remove a folder this run created, or free one the user named."""
    import shutil

    if has_checkpoint(run_dir):
        return
    if created:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        release_run_dir(run_dir)


def writable_dir(path: str | os.PathLike, flag: str) -> Path:
    """Create `path` if needed and check that it is writable, else a ConfigError naming `flag`."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(_("{flag} {folder} is not writable ({reason}); choose another folder").format(
            flag=flag, folder=folder, reason=exc.strerror or exc)) from None
    return folder


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of `metrics.jsonl` (written atomically, so never half a line); none before the first epoch.

    A row that is not an epoch's record as jaxintro writes it is a ValueError naming its line.
    """
    text = read_run_file(run_dir / METRICS_FILE, MAX_METRICS_BYTES) or ""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            row = parse_json(line, f"{METRICS_FILE} line {number}")
            why = _row_problem(row)
            if why:
                raise ValueError(_("{name} line {line}: {why}").format(name=METRICS_FILE, line=number, why=why))
            rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _row_problem(row: Any) -> str | None:
    """What makes `row` not an epoch's record (None: it is one)."""
    if not isinstance(row, dict):
        return _("not a JSON object")
    if type(row.get("epoch")) is not int or row["epoch"] < 0:
        return _("no epoch number")
    if not all(row.get(name) is None or _is_number(row[name]) for name in ("test_accuracy", "loss", "train_accuracy")):
        return _("a value that is not a number")
    members = row.get("members")
    if members is not None and not (isinstance(members, dict) and all(
            isinstance(values, list) and all(v is None or _is_number(v) for v in values) for values in members.values())):
        return _("members that are not lists of numbers")
    return None


def read_result(run_dir: Path) -> dict[str, Any] | None:
    """A run's `result.json` (None: not written yet), or a ValueError when it is not one."""
    text = read_run_file(run_dir / RESULT_FILE, MAX_RESULT_BYTES)
    if text is None:
        return None
    result = parse_json(text, RESULT_FILE)
    if not (isinstance(result, dict) and type(result.get("finished", False)) is bool
            and type(result.get("epochs", 0)) is int):
        raise ValueError(_("{name}: not a result jaxintro writes").format(name=RESULT_FILE))
    return result


def is_finished(result: dict[str, Any] | None, planned_epochs: int) -> bool:
    """Whether a run's `result.json` says it trained all its epochs (files of older versions: by the count)."""
    return result is not None and bool(result.get("finished", result.get("epochs") == planned_epochs))


def read_config(run_dir: Path) -> dict[str, Any]:
    """A run's `config.json` as `jaxintro runs` needs it ({} before it is written), or a ValueError saying why not."""
    text = read_run_file(run_dir / CONFIG_FILE)
    config = {} if text is None else parse_json(text, CONFIG_FILE)
    if not isinstance(config, dict):
        raise ValueError(_("{name}: not a JSON object").format(name=CONFIG_FILE))
    if type(config.get("epochs", 0)) is not int or config.get("epochs", 0) < 0:
        raise ValueError(_("{name}: epochs is not a whole number").format(name=CONFIG_FILE))
    if not all(isinstance(config.get(key, ""), str) for key in ("dataset", RESOLVED_DATASET, "model")):
        raise ValueError(_("{name}: dataset and model are not names").format(name=CONFIG_FILE))
    return config


def describe_run(run_dir: Path) -> dict[str, Any] | None:
    """What `jaxintro runs` shows of one folder: dataset, model, epochs, accuracy and status; None if not a run.

    A folder whose files are not what jaxintro writes is "unreadable", with the reason; it never stops the list.
    """
    if not (os.path.lexists(run_dir / CONFIG_FILE) or os.path.lexists(run_dir / CLAIM_FILE)):
        return None
    try:
        config = read_config(run_dir)
        rows = read_metrics(run_dir)
        result = read_result(run_dir)
        kind = run_kind(config, rows[-1] if rows else None)
        committed = committed_epochs(run_dir)
    except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
        return {"run_dir": str(run_dir), "dataset": "?", "model": "?", "epochs": 0, "planned_epochs": 0,
                "kind": "?", "member_count": 0, "diverged": 0, "test_accuracy": None, "status": "unreadable",
                "reason": str(exc), "result": None}
    # The epochs done are those of the newest committed checkpoint, where a resume goes on from (unless it is
    # damaged: then the one before): a process that died between committing it and writing its row (a lost
    # peer's survivor exits at once) left metrics.jsonl, and the accuracy shown, an epoch behind.
    if committed:
        done = committed[-1]
    else:
        done = rows[-1]["epoch"] if rows else 0
    planned = config.get("epochs", 0)
    if is_finished(result, planned):
        status = "finished"
    elif claim_is_live(run_dir) and result is None:
        status = "running"
    elif committed:
        status = f"stopped after epoch {done}: jaxintro train --resume {run_dir}"
    else:
        status = "empty (no checkpoint)"
    return {"run_dir": str(run_dir), "dataset": config.get(RESOLVED_DATASET, config.get("dataset", "?")),
            "model": config.get("model", "?"), "epochs": done, "planned_epochs": planned,
            **kind, "status": status, "result": result}


# The fields of `config.json` that say which members a run trained (its seeds and a sweep's grid).
MEMBER_FIELDS = ("seed", "seeds", "lr", "lr_grid", "weight_decay", "weight_decay_grid", "optimizer")


def run_kind(config: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """What kind of run a folder holds (one model, seeds, a sweep), how many diverged, and its headline accuracy."""
    fields = {k: v for k, v in config.items() if k != RESOLVED_DATASET}
    try:
        train_config = TrainConfig.from_json(fields)
    except (ConfigError, TypeError, ValueError):
        # Another version's config (a model it no longer has, a field it did not know): a listing needs only
        # which members it trained, read from those fields alone (and values no version wrote are unreadable).
        try:
            train_config = TrainConfig.from_json({k: v for k, v in fields.items() if k in MEMBER_FIELDS})
        except (ConfigError, TypeError, ValueError) as exc:
            raise ValueError(_("{name}: {error}").format(name=CONFIG_FILE, error=exc)) from None
    kind = "sweep" if train_config.sweep else "seeds" if train_config.members > 1 else "single"
    return {"kind": kind, "member_count": train_config.members, "diverged": len(diverged_in(row or {})),
            "test_accuracy": headline_accuracy(train_config, row) if row else None}


def kind_text(info: dict[str, Any]) -> str:
    """`1 model`, `8 seeds`, `sweep: 6 models` (and how many diverged), as `jaxintro runs` prints it."""
    count = info.get("member_count", 1)
    if info.get("kind") == "sweep":
        text = ngettext("sweep: {n} model", "sweep: {n} models", count).format(n=count)
    elif info.get("kind") == "seeds":
        text = ngettext("{n} seed", "{n} seeds", count).format(n=count)
    else:
        text = _("1 model")
    if info.get("diverged"):
        text += ", " + ngettext("{n} diverged", "{n} diverged", info["diverged"]).format(n=info["diverged"])
    return text


# `describe_run`'s statuses stay English (code and `--json` compare them); these are what a learner reads.
STATUS_TEXT = {
    "finished": N_("finished"),
    "running": N_("running"),
    "unreadable": N_("unreadable"),
    "empty (no checkpoint)": N_("empty (no checkpoint)"),
}


def status_text(info: dict[str, Any]) -> str:
    """A run's status (from `describe_run`) as `jaxintro runs` prints it, in the chosen language."""
    if info["status"] == "unreadable" and info.get("reason"):
        return _("unreadable: {reason}").format(reason=info["reason"])
    if info["status"] in STATUS_TEXT:
        return _(STATUS_TEXT[info["status"]])
    return _("stopped after epoch {epoch}: jaxintro train --resume {run_dir}").format(
        epoch=info["epochs"], run_dir=info["run_dir"])


def list_runs(root: Path = Path("runs")) -> list[dict[str, Any]]:
    """Every run folder directly under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = (describe_run(child) for child in sorted(root.iterdir()) if child.is_dir())
    return [info for info in found if info is not None]


def keep_reason(info: dict[str, Any]) -> str | None:
    """Why `runs --remove-unfinished` keeps a folder it would otherwise remove (None: it may go)."""
    run_dir = Path(info["run_dir"])
    if info["status"] in ("finished", "running"):
        return _(STATUS_TEXT[info["status"]])
    if run_dir.is_symlink():
        return _("a symbolic link: remove the link itself if you mean to")
    if info["status"] == "unreadable":
        return _("its files cannot be read: look at it first")
    if has_checkpoint(run_dir):
        return _("it holds a checkpoint: continue it with jaxintro train --resume {run_dir}").format(run_dir=run_dir)
    if claim_is_live(run_dir):
        return _("a live process claims it")
    return None


def remove_run_dir(run_dir: Path) -> bool:
    """Delete an unfinished run folder unless, looked at again under its claim's lock, it must be kept."""
    import shutil

    try:
        with _locked(run_dir):  # a `claim_run_dir` of this folder waits for us, and we for it
            info = describe_run(run_dir)
            if info is None or keep_reason(info) is not None:
                return False
            shutil.rmtree(run_dir)  # never follows a link inside it
    except OSError as exc:  # gone already (another removal), or not ours to delete: kept, and said why
        print(_("Kept {run_dir}: {reason}").format(run_dir=printable(run_dir), reason=exc.strerror or exc),
              file=sys.stderr)
        return False
    return True


def newest_finished_run(root: Path = Path("runs")) -> Path | None:
    """The most recently finished run under `root` (by its result file's time), or None."""
    finished = [Path(info["run_dir"]) for info in list_runs(root) if info["status"] == "finished"]
    return max(finished, key=lambda p: (p / RESULT_FILE).stat().st_mtime, default=None)
