"""Who holds a run folder: a claim made atomically (this process's id and host), freed when its process is gone,
and the lock under which two claims, or a claim and a removal, of one folder take turns."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import socket
from pathlib import Path
from typing import Iterator

from jaxintro.errors import ConfigError
from jaxintro.faults import run_write, watch
from jaxintro.i18n import _, printable
from jaxintro.runs import (CLAIM_FILE, RESULT_FILE, foreign_entries, has_checkpoint, not_ours_text, read_run_file,
                           remove_own_files)


def claim_run_dir(run_dir: str | os.PathLike | None, root: Path = Path("runs")) -> Path:
    """Create and claim a fresh run folder; `None` means `runs/<timestamp>`.

    The claim is `mkdir` of a folder that must not exist yet, or, for a folder given by the user, an
    exclusively created marker holding this process's id. A folder given by the user must be empty, or hold
    only what an earlier jaxintro run wrote before its first checkpoint (it failed to start, or was killed in
    its first epoch) and nobody still runs: that debris is removed first. Anything else there (a checkpoint,
    a result, a live claim, a file jaxintro never writes) is refused before a byte changes: two runs started
    at once never share a folder, and no file of the user's is ever deleted.
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
              "or see `jaxintro runs`").format(path=printable(path))
    try:
        path.mkdir(parents=True, exist_ok=True)
        with locked(path):  # two claims of one folder run one after the other, never interleaved
            foreign = foreign_entries(path)
            if foreign:
                raise ConfigError(not_ours_text("--run-dir", path, foreign))
            if has_checkpoint(path) or os.path.lexists(path / RESULT_FILE) or claim_is_live(path):
                raise ConfigError(taken)
            remove_own_files(path)  # the debris of a run that never wrote a checkpoint
            _write_claim(path / CLAIM_FILE)
    except FileExistsError:
        raise ConfigError(taken) from None
    except OSError as exc:  # the folder cannot be made or locked: the user's choice of folder, not a fault mid-run
        raise ConfigError(_("--run-dir {path} is not writable ({reason}); choose another folder").format(
            path=printable(path), reason=exc.strerror)) from None
    return path


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock: claims and removals of one folder run one after the other, never interleaved."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_claim(marker: Path) -> None:
    watch(marker.parent)  # the run's folder from now on: its later writes check that it is still this one
    with run_write(_("the claim of the run folder"), marker.parent):
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(f"{os.getpid()} {socket.gethostname()}\n")
        except OSError:
            marker.unlink(missing_ok=True)  # a full disk: no half-written claim is left to puzzle a later run
            raise


def read_claim(run_dir: Path) -> tuple[str, str]:
    """The claim's `(pid, host)` as written (`12345 host`; empty where there is none), or a ValueError."""
    pid, _space, host = (read_run_file(run_dir / CLAIM_FILE, 4096) or "").strip().partition(" ")
    return pid, host


def claim_is_live(run_dir: Path) -> bool:
    """Whether the process that claimed `run_dir` still runs (on this host; another host's claim counts as live)."""
    try:
        pid_text, host = read_claim(run_dir)
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


def discard_run_dir(run_dir: Path, *, created: bool) -> None:
    """After a failed start: remove what this run wrote, and the folder too if this run created it (and it is empty)."""
    if has_checkpoint(run_dir):
        return
    remove_own_files(run_dir)
    if created:
        with contextlib.suppress(OSError):  # gone already, or something not ours appeared in it: kept
            run_dir.rmdir()
