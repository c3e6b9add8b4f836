"""The kernel's refusal, not ours: Landlock (Linux 5.13+) restricts a process, and every process it starts, for good.

The checking child is started through this module (`python -I -m jaxintro.exercises.sandbox --write DIR ... --
COMMAND`), which restricts itself and then becomes COMMAND (`exec`), so that nothing the learner's file runs or leaves
behind runs before the restriction: from then on the shipped solutions cannot be read at their place (`open`, a `cat`
it starts, libc through `ctypes`), and nothing can be written, made, renamed or removed outside the folders named with
`--write` (the exercises folder and the check's temp folder) and /dev (its null device): not the installed package,
not the virtual environment (a `.pth` planted there would run at the next start), not a file elsewhere. The audit
hook of `probe.FileGuard` sees only Python's own opens. Landlock grants, it does not deny: the rules allow reading
beneath every sibling of each folder on the path down to the solutions, never the path itself, nor a sibling that is a
link or a mount of a folder on it (a mount of one elsewhere, deeper down, still reads: a user's own doing). What
exists then stays readable; a file created later directly in one of those folders does not (the caller creates what
it will read first; temp files get a folder of their own). Where the kernel has no Landlock (another OS, an older
kernel, a container that forbids it), `confine` returns False and the audit hook is all there is: it refuses
Python's opens of the solutions and Python's opens for writing outside the folders (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jaxintro.exercises.catalog import SOLUTIONS

# landlock(7): the system calls (one number on x86_64 and arm64, both on the generic table) and the rights used.
CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1  # flag: ask the ABI version instead of creating a ruleset
ACCESS_FS_READ_FILE = 1 << 2
# Writing a file, removing and making any kind of entry (ABI 1), moving one across folders (2), truncating one (3).
_WRITE_RIGHTS = {1: (1 << 1) | sum(1 << bit for bit in range(4, 13)), 2: 1 << 13, 3: 1 << 14}
ALWAYS_WRITABLE = (Path("/dev"),)  # /dev/null, which Python and the learner's code open for writing
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38  # prctl(2): required before an unprivileged process restricts itself


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (or not Linux)."""
    libc = _libc()
    if libc is None:
        return 0
    return max(libc.syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)), 0)


def write_rights(abi: int) -> int:
    """Every right that writes, makes, moves or removes a file that the kernel's Landlock ABI `abi` knows."""
    return sum(rights for version, rights in _WRITE_RIGHTS.items() if version <= abi)


def refuse_reading(folder: Path) -> bool:
    """From now on, no file beneath `folder` can be read by this process or any it starts (writing is not
    restricted); False: the kernel cannot enforce it (nothing changed)."""
    return confine(folder, None)


def confine(folder: Path, writable: tuple[Path, ...] | None) -> bool:
    """From now on, no file beneath `folder` can be read by this process or any it starts, and (unless `writable` is
    None) none outside `writable` and /dev written; False: the kernel cannot enforce it (nothing changed)."""
    libc = _libc()
    abi = landlock_abi()
    if libc is None or abi < 1:
        return False
    writing = write_rights(abi) if writable is not None else 0
    attr = _RulesetAttr(ACCESS_FS_READ_FILE | writing)
    ruleset = libc.syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        target = Path(os.path.realpath(folder))
        chain = (*reversed(target.parents), target)  # `/`, ..., the folder: no rule may cover any of them
        _private_temp_folder(chain)
        on_path = {(st.st_dev, st.st_ino) for st in map(os.stat, chain)}
        for ancestor, toward in zip(chain, chain[1:]):
            for entry in os.scandir(ancestor):
                # A link is skipped (what it names is allowed where it lies); a bind mount of the path is not a sibling.
                if entry.path == str(toward) or entry.is_symlink():
                    continue
                st = entry.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) not in on_path and not _allow(libc, ruleset, entry.path, ACCESS_FS_READ_FILE):
                    return False  # a rule refused: restricting now would hide more than the solutions
        for place in (*writable, *ALWAYS_WRITABLE) if writing else ():
            if not _allow(libc, ruleset, os.path.realpath(place), writing):
                return False  # the check could not write where it must
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        return libc.syscall(RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0
    except OSError:  # a folder on the path that cannot be listed: nothing restricted
        return False
    finally:
        os.close(ruleset)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> bool:
    """`rights` allowed beneath `path`; False if the kernel refused the rule (a path gone meanwhile needs none)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        rule = _PathBeneathAttr(rights, fd)
        return libc.syscall(ADD_RULE, ruleset, ctypes.c_uint32(RULE_PATH_BENEATH), ctypes.byref(rule),
                            ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


def _private_temp_folder(chain: tuple[Path, ...]) -> None:
    """Where the temp folder is on the path to the solutions (a project under /tmp), a new temp file would be created
    directly in it, and so be unreadable: temp files go to a folder of their own, made now (removed at exit)."""
    temp = Path(os.path.realpath(tempfile.gettempdir()))
    if temp in chain:
        tempfile.tempdir = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="jaxintro-check-")
        atexit.register(shutil.rmtree, tempfile.tempdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Confine this process (`--write` folders, the solutions refused), then become the command after `--`."""
    parser = argparse.ArgumentParser(prog="python -m jaxintro.exercises.sandbox")
    parser.add_argument("--write", type=Path, action="append", default=[], help="a folder the command may write in")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run confined")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    confine(SOLUTIONS, tuple(args.write))  # where the kernel cannot, the child's audit hook is all there is
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
