"""When the machine fails, not the user: every write of a run goes through here.

A run writes its folder's claim, `config.json`, a checkpoint per epoch (Orbax, in the background),
`metrics.jsonl`, `curves.png` and `result.json`. Each write is one `run_write(what, run_dir)`:

- the run folder is checked first: a folder that was deleted (or deleted and made again) since the
  run claimed it stops the run at its next write, instead of training on over nothing;
- any refusal of the OS (no space left, a read-only or vanished folder, an I/O error) becomes a
  `WriteFault`, which the CLI prints as one line with the last epoch safely on disk and the
  command that continues from it (exit code 74, `EX_IOERR` of sysexits.h);
- the fault seam: `JAXINTRO_FAIL_WRITE=N:ENOSPC` makes the Nth write of the process fail with that
  errno (ENOSPC, EROFS, EIO, ...), as SQLite's I/O-error tests do, for the faults a test cannot
  cause for real.

Orbax reports its background failures through absl's and asyncio's loggers, with a traceback per
thread, and TensorStore's threads through `sys.unraisablehook`; those records are kept here instead
of reaching the terminal, and written to `errors.log` in the run folder when a write fails (if the
disk still takes it).
"""

from __future__ import annotations

import contextlib
import errno as errnos
import gc
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from pathlib import Path
from typing import Iterator

from jaxintro.errors import ConfigError, JaxintroError
from jaxintro.i18n import _

EXIT_WRITE_FAULT = 74  # EX_IOERR: the machine refused a write; distinct from a user error's 2
FAIL_WRITE_ENV = "JAXINTRO_FAIL_WRITE"
MAX_RECORDS = 200  # of Orbax's log records kept for errors.log: a failed save logs a few dozen

_writes = 0  # writes of this process so far, as the seam counts them
_identity: dict[Path, tuple[int, int]] = {}  # each watched run folder's (device, inode)
_written: dict[Path, str] = {}  # a file each watched folder holds once written (its config.json)
CONFIG_NAME = "config.json"  # runs.CONFIG_FILE (runs imports this module)
_records: list[str] = []  # the libraries' error records and the faults' tracebacks, for errors.log
# What a failed exchange between processes says (Orbax's barrier over Gloo or JAX's coordination service), as
# opposed to a write the disk refused: `Gloo AllGather failed: ... Connection reset by peer`, `Barrier timed out`.
BETWEEN_PROCESSES = re.compile(r"gloo|barrier|coordination service|all-?gather", re.IGNORECASE)


class WriteFault(JaxintroError):
    """The machine refused a write of a run: `what` could not be written in `run_dir`, for `reason`."""

    def __init__(self, what: str, run_dir: Path, reason: str, *, vanished: bool = False, swapped: bool = False) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.run_dir = run_dir
        self.reason = reason
        self.vanished = vanished  # the run folder itself is gone: nothing of it is left to continue from
        self.swapped = swapped  # its checkpoints/ was replaced: what is there now is not the run's

    def between_processes(self) -> bool:
        """Whether a save failed in the exchange between processes (Orbax's barrier), not on the disk.

        A refusal of the OS has the OS's words as its reason (`os_reason`), never the library's message.
        """
        return BETWEEN_PROCESSES.search(self.reason) is not None


def os_reason(code: int | None, fallback: str = "") -> str:
    """An errno as the OS says it, with its name: `No space left on device [ENOSPC]`."""
    if code is None or code not in errnos.errorcode:
        return fallback or _("unknown error")
    return f"{os.strerror(code)} [{errnos.errorcode[code]}]"


def errno_in(exc: BaseException) -> int | None:
    """The OS error behind `exc`: its errno, or the one TensorStore writes into its message (`os_error_code='28'`)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    found = re.search(r"os_error_code='?(\d+)", str(exc))
    if found:
        return int(found.group(1))
    for name in ("ENOSPC", "EROFS", "EIO", "ENOENT", "EDQUOT"):  # the text of an errno Orbax passed on
        if os.strerror(getattr(errnos, name)) in str(exc):
            return getattr(errnos, name)
    return None


def fault_from(exc: BaseException, what: str, run_dir: Path) -> WriteFault:
    """`exc` (an OSError, or a library's error wrapping one) as the WriteFault of `what`; its detail goes to the log."""
    code = errno_in(exc)
    lines = [line for line in str(exc).splitlines() if line.strip()]
    reason = os_reason(code, (lines[0] if lines else type(exc).__name__)[:200])
    keep(f"{what}: {type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)))
    if folder_changed(run_dir):  # Orbax's thread found the folder gone: that is the fault to name
        return WriteFault(what, run_dir, _("the run folder was removed while the run was writing to it"),
                          vanished=True)
    return WriteFault(what, run_dir, reason)


@contextlib.contextmanager
def run_write(what: str, run_dir: Path) -> Iterator[None]:
    """One write of a run: counted by the seam, refused if the run folder vanished; an OSError becomes a WriteFault."""
    check_folder(what, run_dir)
    try:
        inject()
        yield
    except FileExistsError:  # a name taken (another run's claim): the caller's answer, not the machine's fault
        raise
    except OSError as exc:
        raise fault_from(exc, what, run_dir) from None
    if what == CONFIG_NAME:  # from now on the folder must hold it: a folder re-created in its place would not
        _written[Path(os.path.abspath(run_dir))] = CONFIG_NAME


def inject() -> None:
    """The fault seam: count this write, and fail it as `JAXINTRO_FAIL_WRITE=N:ERRNO` asks."""
    global _writes
    _writes += 1
    wanted = os.environ.get(FAIL_WRITE_ENV)
    if not wanted:
        return
    number, _colon, name = wanted.partition(":")
    code = getattr(errnos, name, None)
    if not number.isdigit() or not isinstance(code, int):
        raise ConfigError(_("{env} must be N:ERRNO, like 3:ENOSPC; got {value}").format(
            env=FAIL_WRITE_ENV, value=repr(wanted)))
    if _writes == int(number):
        raise OSError(code, os.strerror(code))


def check_folder(what: str, run_dir: Path) -> None:
    """Stop the run if `run_dir` is gone, or is not the folder `watch` took (deleted, then made anew).

    Orbax makes missing folders again when it saves, so a deleted run folder could come back holding
    only the newest checkpoint's debris: the folder's identity (device, inode) tells the two apart.
    """
    if folder_changed(run_dir):
        raise WriteFault(what, run_dir, _("the run folder was removed while the run was writing to it"),
                         vanished=True)


def folder_changed(run_dir: Path) -> bool:
    """Whether `run_dir` is gone, or is another folder than the one `watch` saw."""
    try:
        stat = os.stat(run_dir)
    except OSError:
        return True
    # Orbax re-creates a deleted folder, and the file system may give it the old one's inode number: a file
    # this run wrote there and that is gone tells the two apart.
    written = _written.get(Path(os.path.abspath(run_dir)))
    if written is not None and not (run_dir / written).exists():
        return True
    return _identity.get(Path(os.path.abspath(run_dir)), (stat.st_dev, stat.st_ino)) != (stat.st_dev, stat.st_ino)


def watch(run_dir: Path) -> None:
    """Take `run_dir` as it is now as the run's folder: from here on, its writes check that it is still this one."""
    stat = os.stat(run_dir)
    _identity[Path(os.path.abspath(run_dir))] = (stat.st_dev, stat.st_ino)
    _written.pop(Path(os.path.abspath(run_dir)), None)
    _records.clear()  # an earlier run's records (in this process) are not this run's errors.log


class _Keeper(logging.Handler):
    """Keeps log records in memory, for errors.log, instead of printing them."""

    def emit(self, record: logging.LogRecord) -> None:
        if len(_records) < MAX_RECORDS:
            keep(self.format(record))


def keep(text: str) -> None:
    """Keep `text` for errors.log."""
    _records.append(text)


def _keep_traceback(unraisable) -> None:
    """Keep an exception nothing could raise, with its traceback, among the records."""
    keep("".join(traceback.format_exception(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)))


def _keep_unraisable(unraisable) -> None:
    """TensorStore's callbacks, in threads of their own, raise into Orbax's closed event loop after a failed save."""
    if threading.current_thread() is threading.main_thread():
        sys.__unraisablehook__(unraisable)
        return
    _keep_traceback(unraisable)


def collect_abandoned() -> None:
    """Collect what a failed library call left behind (Orbax's coroutines, never awaited, with their errors) now,
    among the records kept for errors.log (written if the run's own write fails): collected later, at exit, Python
    would print each with a traceback under the one line that says what failed."""
    previous, sys.unraisablehook = sys.unraisablehook, _keep_traceback
    try:
        with warnings.catch_warnings(record=True) as caught:  # "coroutine ... was never awaited"
            warnings.simplefilter("always")
            gc.collect()
        for warning in caught:
            keep(warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno))
    finally:
        sys.unraisablehook = previous


def capture_library_logs() -> None:
    """Route absl's and asyncio's records (Orbax's background failures, tracebacks included) into errors.log.

    So do the exceptions TensorStore's own threads cannot raise anywhere (`sys.unraisablehook`):
    Python would print each with a traceback.
    """
    sys.unraisablehook = _keep_unraisable
    logging.getLogger("absl").setLevel(logging.ERROR)  # Orbax logs every save at INFO/WARNING: the log says enough
    for name in ("absl", "asyncio"):  # asyncio: "Task exception was never retrieved", for Orbax's failed writes
        logger = logging.getLogger(name)
        if not any(isinstance(handler, _Keeper) for handler in logger.handlers):
            handler = _Keeper()
            handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
            logger.addHandler(handler)
        logger.propagate = False


def kept_records() -> list[str]:
    """The records kept so far, for errors.log (`runs.write_log` writes them)."""
    return list(_records)


def forget_records() -> None:
    """Forget the kept records, once errors.log holds them."""
    _records.clear()
