"""Run folders: written atomically, so nothing is half-written (who holds one, its claim, is `claims.py`).

A run folder may come from someone else (a classmate's zip, a course page): every file and link in it is
hostile, everything outside it is the user's. Two rules hold for every command, and live here alone
(docs/reliability.md):

- **Writes**: never through a link (a new file is made `O_CREAT|O_EXCL|O_NOFOLLOW` in the folder itself, then
  renamed over its name; an append is opened `O_NOFOLLOW`), never outside the folder, and a delete removes
  only what jaxintro can prove it wrote: its claim, its own file names, its own step folders.
- **Reads**: regular files only, not through a link, and bounded in size before reading; the checkpoint tree
  is checked so before Orbax reads or writes a byte of it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from jaxintro.errors import CheckpointError, ConfigError
from jaxintro.faults import WriteFault, forget_records, kept_records, run_write
from jaxintro.i18n import _, ngettext, printable
from jaxintro.jsonio import json_safe, parse_json

CONFIG_FILE = "config.json"
RESOLVED_DATASET = "resolved_dataset"  # written into config.json beside the config: the dataset `auto` became
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
ERRORS_LOG = "errors.log"  # the libraries' records of a failed write (`write_log`)
CLAIM_FILE = ".claimed"
CHECKPOINT_DIR = "checkpoints"  # Orbax's steps, one folder each (written by `jaxintro.checkpoint`)
# Every name jaxintro writes directly in a run folder; a delete removes these and its step folders, nothing else.
OWN_FILES = (CLAIM_FILE, CONFIG_FILE, METRICS_FILE, RESULT_FILE, "curves.png", "sweep.png", "confusion.png",
             ERRORS_LOG)
# A step folder Orbax committed (ASCII digits: `isdigit` also takes `²`, which `int` refuses), or one it was
# still writing (`3.orbax-checkpoint-tmp-1733490000`).
STEP_NAME = re.compile(r"[0-9]+(\.orbax-checkpoint-tmp(-[0-9]+)?)?")
COMMITTED_STEP = re.compile(r"[0-9]+")
# A temporary file of `write_atomic` left by a process that died mid-write: `.config.json.k3j9x_2.tmp`.
OWN_TEMPORARY = re.compile(r"\.(%s)\.[A-Za-z0-9_]+\.tmp" % "|".join(re.escape(name) for name in OWN_FILES))
# A run folder may come from someone else (a classmate's, a download): its files are input, read with a cap.
MAX_RUN_FILE_BYTES = 1 << 20  # config.json and the claim: a few hundred bytes each
# metrics.jsonl and result.json grow with the members: about 120 bytes per member and epoch, 230 per member
# (1,024 members for 100 epochs: 12 MiB). A checkpoint's meta holds the same rows.
MAX_METRICS_BYTES = 32 << 20
MAX_RESULT_BYTES = 8 << 20
MAX_CHECKPOINT_FILE_BYTES = 16 << 30  # an array's chunk (`d/...`): far beyond what a chip holds
MAX_CHECKPOINT_ENTRIES = 10_000  # 3 steps of a few dozen files each


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to a new temporary file beside `path`, fsync, then rename it over `path`.

    The temporary file is made `O_CREAT|O_EXCL|O_NOFOLLOW` (`mkstemp`) under a fresh name, so no link placed
    in the folder is followed; the rename replaces whatever `path` is (a link too) and never writes through it.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_text(path: Path, text: str) -> None:
    """Append `text` to `path` (made if absent), never through a link nor into anything but a regular file.

    Whole or not at all: when the disk fills up during the write, the file is put back as it was (a new one
    removed), so no half-written record is left.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd, created = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        fd, created = os.open(path, flags), False  # a link there: ELOOP, never followed
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # a FIFO or a device in the run folder: not ours to write into
            raise OSError(errno.EINVAL, _("not a regular file"), str(path))
        try:
            with open(fd, "a", encoding="utf-8", closefd=False) as out:
                out.write(text)
        except OSError:
            with contextlib.suppress(OSError):
                if created:
                    os.unlink(path)
                else:
                    os.ftruncate(fd, info.st_size)
            raise
    finally:
        os.close(fd)


def write_json(path: Path, obj: Any) -> None:
    """Atomically write `obj` as indented JSON (NaN and infinities as null: every JSON file jaxintro writes is JSON)."""
    write_atomic(path, json.dumps(json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_run_file(path: Path, limit: int = MAX_RUN_FILE_BYTES) -> str | None:
    """A text file of a run folder (None: absent), or a ValueError that says why not; never a hang.

    `read_bounded`, not followed through a link: a file of the folder is the folder's, not what it points to.
    """
    try:
        data = read_bounded(path, limit, follow_links=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = _("a symbolic link") if exc.errno == errno.ELOOP else exc.strerror
        raise ValueError(_("{name}: {why}").format(name=path.name, why=why)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(_("{name}: not UTF-8 text").format(name=path.name)) from None


def read_bounded(path: Path, limit: int, *, follow_links: bool = True) -> bytes:
    """A file's bytes, a regular file only (a FIFO would block, /dev/zero never end) and at most `limit`, or an
    OSError saying why not: the read rule, for a run folder's files (links not followed) and for a dataset's
    that a run names (followed: the user's own data folder may link its files; they are verified once read)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags)  # O_NONBLOCK: a FIFO opens at once, then the check below refuses it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, _("not a regular file"), str(path))
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, _("larger than {limit:,} bytes").format(limit=limit), str(path))
    return data


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


def committed_epochs(run_dir: Path) -> list[int]:
    """The checkpoints Orbax committed in `run_dir` (a step's folder gets its number only once complete)."""
    try:
        return sorted(int(child.name) for child in (run_dir / CHECKPOINT_DIR).iterdir()
                      if COMMITTED_STEP.fullmatch(child.name))
    except OSError:
        return []


def has_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir/checkpoints/` holds a finished step (Orbax renames a step's folder only when complete)."""
    return bool(committed_epochs(run_dir))


def foreign_entries(run_dir: Path) -> list[str]:
    """What `run_dir` holds that jaxintro never writes there ([]: nothing), each name as `ls -F` shows it.

    jaxintro's are its own file names as regular files (and `write_atomic`'s temporary files), and
    `checkpoints/` as a real folder of step folders (a link to another run's would be written through).
    """
    foreign = []
    for entry in _scan(run_dir):
        if entry.name == CHECKPOINT_DIR and entry.is_dir(follow_symlinks=False):
            foreign += [f"{CHECKPOINT_DIR}/{step.name}{_kind_mark(step)}" for step in _scan(Path(entry.path))
                        if not (STEP_NAME.fullmatch(step.name) and step.is_dir(follow_symlinks=False))]
        elif not ((entry.name in OWN_FILES or OWN_TEMPORARY.fullmatch(entry.name))
                  and entry.is_file(follow_symlinks=False)):
            foreign.append(entry.name + _kind_mark(entry))
    return sorted(foreign)


def _scan(folder: Path) -> list[os.DirEntry]:
    """The entries of `folder` (none if it is not one), at most a bounded number: a zip may hold millions."""
    try:
        with os.scandir(folder) as entries:
            return [entry for _number, entry in zip(range(MAX_CHECKPOINT_ENTRIES), entries)]
    except OSError:
        return []


def _kind_mark(entry: os.DirEntry) -> str:
    """`/` for a folder, `@` for a link, `|` for a FIFO (as `ls -F` marks them), else nothing."""
    if entry.is_symlink():
        return "@"
    if entry.is_dir(follow_symlinks=False):
        return "/"
    return "" if entry.is_file(follow_symlinks=False) else "|"


def not_ours_text(flag: str, folder: Path, foreign: Sequence[str]) -> str:
    """The refusal of a folder that holds what jaxintro did not write: what is there, and how to go on."""
    shown = ", ".join(printable(name) for name in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
    return ngettext("{flag} {folder} holds {count} thing jaxintro did not write ({names}); nothing was changed: "
                    "choose a new or empty folder",
                    "{flag} {folder} holds {count} things jaxintro did not write ({names}); nothing was changed: "
                    "choose a new or empty folder", len(foreign)).format(
        flag=flag, folder=printable(folder), count=len(foreign), names=shown)


def remove_own_files(run_dir: Path) -> None:
    """Remove what jaxintro wrote in `run_dir`: its own file names and its step folders; nothing else is touched.

    A link in their place is removed as a link, never followed; the step folders are removed through a descriptor
    of `checkpoints/` opened without following a link (a link put there afterwards leads nowhere), each tree without
    following any link inside it (`shutil.rmtree`).
    """
    for entry in _scan(run_dir):
        if (entry.name in OWN_FILES or OWN_TEMPORARY.fullmatch(entry.name)) and not entry.is_dir(
                follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    try:
        checkpoints = PinnedFolder(run_dir / CHECKPOINT_DIR)
    except OSError:  # none, or a link: nothing of ours
        return
    with contextlib.closing(checkpoints):
        checkpoints.remove_steps(lambda name: STEP_NAME.fullmatch(name) is not None)
    with contextlib.suppress(OSError):
        (run_dir / CHECKPOINT_DIR).rmdir()  # only once empty, and never a link's target


class PinnedFolder:
    """A folder held by a descriptor, opened without following a link: what is read, written or deleted through
    `path` (or `remove_steps`) is in this folder, whatever is put at its name afterwards, and `replaced` says whether
    its name still leads to it. How Orbax is handed a run's `checkpoints/` (Linux's /proc/self/fd; elsewhere its name)."""

    def __init__(self, folder: Path) -> None:
        self.name = folder
        self.fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(self.fd)
        self.identity = (info.st_dev, info.st_ino)

    @property
    def path(self) -> Path:
        """A path that leads to this folder for as long as it is held."""
        held = Path(f"/proc/self/fd/{self.fd}")
        return held if held.is_dir() else self.name

    def replaced(self) -> str | None:
        """None while its name still leads to this folder; else what happened to it, in words."""
        try:
            info = os.lstat(self.name)
        except FileNotFoundError:
            return _("it was removed")
        if stat.S_ISLNK(info.st_mode):
            return _("it was replaced by a symbolic link")
        return None if (info.st_dev, info.st_ino) == self.identity else _("it was replaced by another folder")

    def remove_steps(self, chosen: Callable[[str], bool]) -> None:
        """Delete the sub-folders whose names are `chosen`, without following a link, here and inside them."""
        with os.scandir(self.fd) as entries:
            names = [entry.name for _number, entry in zip(range(MAX_CHECKPOINT_ENTRIES), entries)
                     if chosen(entry.name) and entry.is_dir(follow_symlinks=False)]
        for name in names:
            shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)

    def close(self) -> None:
        os.close(self.fd)


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
            why = row_problem(row)
            if why:
                raise ValueError(_("{name} line {line}: {why}").format(name=METRICS_FILE, line=number, why=why))
            rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def row_problem(row: Any) -> str | None:
    """What makes `row` not an epoch's record (None: it is one)."""
    if not isinstance(row, dict):
        return _("not a JSON object")
    if type(row.get("epoch")) is not int or row["epoch"] < 0:
        return _("no epoch number")
    if not all(row.get(name) is None or _is_number(row[name]) for name in ("test_accuracy", "loss", "train_accuracy")):
        return _("a value that is not a number")
    members = row.get("members", {})  # absent: one model; present: one list a field, one number a member
    lengths = {len(values) if isinstance(values, list) else -1 for values in members.values()} \
        if isinstance(members, dict) else {-1}
    if len(lengths) > 1 or -1 in lengths or not all(
            v is None or _is_number(v) for values in members.values() for v in values):
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


def is_own_config(config: dict[str, Any]) -> bool:
    """Whether a folder's `config.json` is one jaxintro wrote (every version's names the model and the epochs), or
    there is none (a run claimed, its config not yet written); another program's `config.json` names neither."""
    return not config or {"model", "epochs"} <= config.keys()


def files_signature(run_dir: Path) -> tuple:
    """What changes when a run folder's files do (each one's inode, size and time, and its steps'): a reader may
    keep what it parsed while this stays the same."""
    names = (CLAIM_FILE, CONFIG_FILE, METRICS_FILE, RESULT_FILE, CHECKPOINT_DIR)
    signature = []
    for name in names:
        try:
            info = os.lstat(run_dir / name)
            signature.append((name, info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            signature.append((name, None))
    return tuple(signature)


def written_now() -> str:
    """The time a result is written, as `result.json` records it (UTC, to the second)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def check_checkpoint_tree(run_dir: Path) -> None:
    """Refuse a checkpoint tree Orbax must not read or write: links, FIFOs, devices, oversized files.

    Orbax and TensorStore open what they find, follow links, and read files whole: a link to another
    run's checkpoints would be written through, one to /dev/zero read until memory runs out. Checked
    before Orbax is handed the folder; step folders and their files are Orbax's own names.
    """
    top = run_dir / CHECKPOINT_DIR
    if not os.path.lexists(top):
        return
    pending, seen = [top], 0
    while pending:
        folder = pending.pop()
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode):
            raise CheckpointError(_("{path} is {what}, not a folder of checkpoints; jaxintro reads no link or special "
                                    "file there: use a run folder that holds its own checkpoints").format(
                path=printable(folder), what=_("a symbolic link") if stat.S_ISLNK(info.st_mode) else _("a file")))
        for entry in _scan(folder):
            seen += 1
            if seen > MAX_CHECKPOINT_ENTRIES:
                raise CheckpointError(_("{path} holds more than {count:,} files: not checkpoints jaxintro "
                                        "wrote").format(path=printable(top), count=MAX_CHECKPOINT_ENTRIES))
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                raise CheckpointError(_("{path} is {what}; jaxintro reads no link or special file in a checkpoint: "
                                        "use a run folder that holds its own checkpoints").format(
                    path=printable(entry.path),
                    what=_("a symbolic link") if entry.is_symlink() else _("not a regular file")))
            elif entry.stat(follow_symlinks=False).st_size > _file_limit(entry):
                raise CheckpointError(_("{path} is larger than {limit:,} bytes: not a checkpoint jaxintro wrote").format(
                    path=printable(entry.path), limit=_file_limit(entry)))


def _file_limit(entry: os.DirEntry) -> int:
    """How large a checkpoint's file may be: an array's chunk (under `d/`) is large, the rest is metadata."""
    return MAX_CHECKPOINT_FILE_BYTES if Path(entry.path).parent.name == "d" else MAX_METRICS_BYTES


def write_log(run_dir: Path) -> Path | None:
    """Append the libraries' kept records to `run_dir/errors.log` if the disk takes them; its path, or None.

    Whole or not at all, and never through a link: the records are appended by `append_text`.
    """
    records = kept_records()
    if not records:
        return None
    path = run_dir / ERRORS_LOG
    try:
        append_text(path, "\n".join(records) + "\n")
    except OSError:
        return None
    forget_records()
    return path


def stopped_line(fault: WriteFault) -> str:
    """The one line a failed write ends the run with: what failed and why, what is on disk, and how to go on."""
    run_dir = fault.run_dir
    failed = _("could not write {what} in {run_dir}: {reason}").format(what=fault.what, run_dir=run_dir,
                                                                        reason=fault.reason)
    epochs = committed_epochs(run_dir) if run_dir.is_dir() and not (fault.vanished or fault.swapped) else []
    if fault.vanished:
        line = _("{failed}; its checkpoints went with it, so the run stopped: start it again").format(failed=failed)
    elif fault.swapped:  # what is at checkpoints/ now is someone else's: its steps are not this run's to name
        line = _("{failed}; the run stopped: its checkpoints stay in the folder that was there, wherever it is now; "
                 "look at who changed {run_dir} before training in it again").format(failed=failed, run_dir=run_dir)
    elif epochs:
        line = _("{failed}; epoch {epoch} is safely on disk (its checkpoint); once the cause is fixed (free space, "
                 "a writable folder), continue with: jaxintro train --resume {run_dir}").format(
            failed=failed, epoch=epochs[-1], run_dir=run_dir)
    else:
        line = _("{failed}; no epoch was on disk yet, so there is nothing to continue from: once the cause is fixed, "
                 "run the same command again").format(failed=failed)
    log = write_log(run_dir) if run_dir.is_dir() and not fault.vanished else None
    return line + (" " + _("(details in {log})").format(log=log) if log else "")
