"""Run an exercise's checks on the learner's file: the checks here, the file in another process (`check_in_child`).

The learner's file runs in a child (`python -I -m jaxintro.exercises.probe`), which holds no check and
no verdict: the checks run in this process and call the file's functions across two pipes
(`learner.py`), so the file can neither read a verdict nor patch a check. The child's stdout and
stderr are read into bounded buffers (a file that prints without end cannot fill a pipe or the
memory), each file's checks end within the time limit, and in `finally` every process of the check
ends: the child's process group and, on Linux, every descendant, those the learner's code detached
too (`setsid`, a double fork: this process adopts orphans while the check runs,
`PR_SET_CHILD_SUBREAPER`). An infinite loop, a crash or Ctrl-C never leaves a process behind. The
child has its own session, so a Ctrl-C in the terminal reaches this process only, which then stops
the child. `check_file` runs the same checks with the file in this process (the tests).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Callable, Iterator

from jaxintro.data import default_cache_dir
from jaxintro.exercises.catalog import Exercise
from jaxintro.exercises.learner import Child, InProcess, Learner, ProberGone
from jaxintro.i18n import _, in_language

STDERR_KEPT = 4000  # bytes of the child's stderr kept: its last line explains a crash
REAP_SECONDS = 5  # after the child is killed: how long its pipes may take to close
# A check takes a few seconds; past this, the learner is told it is still running, and how long it may (an endless
# loop would otherwise sit silent until the time limit).
STILL_RUNNING_SECONDS = 10
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphans of this process's descendants are re-parented to it, not to init
_CHECK_MODULES = {range(1, 5): "checks_build", range(5, 11): "checks_puzzles", range(11, 15): "checks_lesson",
                  range(15, 16): "checks_optax"}


@dataclasses.dataclass
class Verdict:
    """The outcome of one exercise's checks: passed, or the first failure's key and message."""

    number: int
    slug: str
    passed: bool
    key: str | None = None
    message: str = ""
    printed: int = 0  # characters the learner's code printed while checked
    output: str = ""  # the first of them
    notes: list[str] = dataclasses.field(default_factory=list)  # what a check cannot fail but a learner should know
    unlocked: list[str] = dataclasses.field(default_factory=list)  # the files this pass made appear

    @classmethod
    def failed(cls, exercise: Exercise, key: str, message: str) -> "Verdict":
        """A failure of `exercise`."""
        return cls(exercise.number, exercise.slug, False, key, message)


def check_function(exercise: Exercise) -> Callable[[Learner], None]:
    """The check of `exercise` (imports JAX)."""
    module = next(name for numbers, name in _CHECK_MODULES.items() if exercise.number in numbers)
    return getattr(importlib.import_module(f"jaxintro.exercises.{module}"), f"check_{exercise.slug}")


def check_file(exercise: Exercise, path: Path) -> Verdict:
    """Run `exercise`'s checks on `path`, with the file in this process; its prints are captured, not shown."""
    return check(Learner(InProcess()), exercise, path)


def check(learner: Learner, exercise: Exercise, path: Path, timeout: float = float("inf")) -> Verdict:
    """Load `path` in `learner`'s process and run `exercise`'s checks on it, within `timeout` seconds."""
    check_fn = check_function(exercise)  # imported while the child starts up; a missing check is our bug, not theirs
    folder = path.parent.resolve()
    before = _listing(folder)
    loaded = learner.load(path, timeout)
    if "syntax_error" in loaded:
        verdict = Verdict.failed(exercise, "syntax_error", _("syntax error at line {line} of {file}: {error}").format(
            line=loaded["syntax_error"]["line"], file=path.name, error=loaded["syntax_error"]["message"]))
    elif "raised" in loaded:
        raised = loaded["raised"]
        verdict = Verdict.failed(exercise, "import_error", _(
            "{file} raised {error} at line {line} while loading: {detail}").format(
            file=path.name, error=raised.type_name, line=raised.line or "?",
            detail=raised.first_line()))
    elif missing := [name for name in exercise.functions if name not in loaded["callables"]]:
        verdict = Verdict.failed(exercise, "missing_function", _(
            "{file} defines no function {name}: keep the name and signature of the starter file").format(
            file=path.name, name=missing[0]))
    else:
        verdict = _run_check(learner, exercise, check_fn)
    report = learner.report()
    verdict.printed, verdict.output = report["printed"], report["output"]
    verdict.notes = silent_mistakes(report, before, folder)
    return _refuse_a_read_solution(exercise, _refuse_a_traced_global(exercise, verdict, report["traced_globals"]),
                                   report["opened"])


def _run_check(learner: Learner, exercise: Exercise, check_fn: Callable[[Learner], None]) -> Verdict:
    """The verdict of `check_fn` on the loaded file (every one of its functions is there)."""
    from jaxintro.exercises.checking import CheckFailed

    import jax

    try:
        # Full float32 matmuls on every backend for the references too (a GPU's default TF32 would miss tolerances).
        with jax.default_matmul_precision("highest"):
            check_fn(learner)
        return Verdict(exercise.number, exercise.slug, True)
    except CheckFailed as exc:
        return Verdict.failed(exercise, exc.key, exc.message)
    except Exception as exc:  # what the learner's code returned broke a comparison, or its given code raised
        return Verdict.failed(exercise, "unexpected", _(
            "the check could not use what your code returned ({error}: {detail})").format(
            error=getattr(exc, "type_name", type(exc).__name__), detail=(str(exc).splitlines() or [""])[0][:200]))


def _listing(folder: Path) -> set[Path] | None:
    """The files in `folder` (None: it cannot be listed, and nothing is said of what was written)."""
    try:
        return set(folder.iterdir())
    except OSError:
        return None


def silent_mistakes(report: dict, before: set[Path] | None, folder: Path) -> list[str]:
    """What the learner's file did that no check fails but the lesson would not do: each as a note."""
    notes = []
    if report["tracer"]:
        notes.append(_("your file printed a traced value ({seen}): under jax.jit, print runs once while the function "
                       "is traced and shows no numbers; jax.debug.print(\"x = {{x}}\", x=x) prints the values at "
                       "every call").format(seen=report["tracer"]))
    if report["x64"]:
        notes.append(_("your file turns on jax_enable_x64: arrays default to float64, where the lesson computes in "
                       "float32; remove jax.config.update(\"jax_enable_x64\", True)"))
    after = _listing(folder)
    written = sorted(p.name for p in (after - before if before is not None and after is not None else ())
                     if not p.name.startswith(".") and p.name != "__pycache__" and p.suffix != ".py")
    if written:
        notes.append(_("your file wrote {files} while it was checked: a check calls your functions many times; write "
                       "files under `if __name__ == \"__main__\":`, which a check does not run").format(
                       files=", ".join(written[:5])))
    return notes


def _refuse_a_traced_global(exercise: Exercise, verdict: Verdict, names: list[str]) -> Verdict:
    """`verdict`, unless it passed while a global of the file holds a tracer: a jitted function wrote it (a side
    effect, which runs once, at trace time), whatever its return values say."""
    if not (verdict.passed and names):
        return verdict
    return _failed_instead(verdict, exercise, "tracer_in_global", _(
        "your file's global {name} holds a traced value: a function under jax.jit stored it there while it was traced "
        "(`global`, or .append to a list); that line runs once, at the first call, and keeps a placeholder with no "
        "number, not each call's value. A jitted function is pure: return what the caller needs").format(
        name=names[0]))


def _refuse_a_read_solution(exercise: Exercise, verdict: Verdict, opened: list[str]) -> Verdict:
    """`verdict`, unless the learner's code tried to open a shipped solution (`probe.FileGuard`): no pass by
    their text."""
    if not opened:
        return verdict
    return _failed_instead(verdict, exercise, "reads_solution", _(
        "your file opened the shipped solution {name}: write the function yourself (`jaxintro exercises "
        "solution {n}` shows it to read, not to run)").format(name=opened[0], n=exercise.number))


def _failed_instead(verdict: Verdict, exercise: Exercise, key: str, message: str) -> Verdict:
    """A failed verdict `key` in place of `verdict`, with what the file printed and the notes kept."""
    return dataclasses.replace(Verdict.failed(exercise, key, message), printed=verdict.printed, output=verdict.output,
                               notes=verdict.notes)


def isolated(module: str) -> list[str]:
    """`python -I -m module`, with this process's import path: what found jaxintro and JAX here (a PYTHONPATH, the
    user's site, a `module load`) finds them there too, which `-I` alone would drop; `-I` still keeps out the
    environment's other PYTHON* settings and the child's own folder (the learner's) from the front of the path."""
    path = [entry for entry in sys.path if os.path.isabs(entry) and entry != os.getcwd()]
    boot = f"import runpy, sys; sys.path[:] = {path!r}; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return [sys.executable, "-I", "-c", boot]


def check_in_child(items: list[tuple[Exercise, Path]], lang: str, *, timeout: float) -> list[Verdict]:
    """Check each (exercise, file), the files run one after another in one child, each within `timeout` seconds.

    The child and everything the learner's code starts are killed when the checks end, and no wait is
    unbounded: a process that outlives its group (a learner's `Popen` holding our pipes) delays nothing.
    """
    # Absolute: the child runs in the files' folder, where a path relative to ours would name nothing.
    items = [(exercise, path.resolve()) for exercise, path in items]
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")  # tiny inputs: the CPU starts fastest; the learner may choose
    # No persistent compilation cache (a JAX user's shell often names one): the child may not write there, and JAX's
    # warning of each refused entry would read as the learner's own output.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    # The child's temp files in a folder of the check's, removed here: the child is killed, so it removes nothing.
    env["TMPDIR"] = temp = tempfile.mkdtemp(prefix="jaxintro-check-")
    to_child, requests = os.pipe()
    answers, from_child = os.pipe()
    # Confined before its interpreter starts (`sandbox.main`, then exec): it may write in the files' folders and the
    # temp folder only, so nothing it leaves in the package or the venv runs at the next start, outside any check.
    writable = [arg for place in sorted({str(path.parent) for _e, path in items} | {temp})
                for arg in ("--write", place)]
    command = [*isolated("jaxintro.exercises.sandbox"), *writable, "--", *isolated("jaxintro.exercises.probe"),
               "--in-fd", str(to_child), "--out-fd", str(from_child), *writable]
    try:
        with in_language(lang), adopting_orphans() as children_before:
            try:
                # Its prints reach us through Python's own streams, captured there; what it writes to the
                # descriptors goes nowhere, but its stderr, whose last line explains a crash.
                # In the files' folder, where a relative path written by the file lands (and may be written).
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, env=env, start_new_session=True,
                                        pass_fds=(to_child, from_child), cwd=items[0][1].parent if items else None)
            finally:
                os.close(to_child)  # the child holds them now: the pipes end when the child does
                os.close(from_child)
            stderr = _Drain(proc.stderr)
            try:
                _settle_a_checking_command()  # while the child starts
                return _check_each(Learner(Child(requests, answers)), items, timeout, proc, stderr)
            finally:
                _end_the_check(proc, children_before, stderr)
    finally:
        os.close(requests)
        os.close(answers)
        shutil.rmtree(temp, ignore_errors=True)


def _settle_a_checking_command() -> None:
    """In a command that only checks (JAX not yet imported here): JAX on the CPU, as the checks' references are tiny
    and a TPU serves one process at a time, which the learner's file may want; Hypothesis's cache of what it learns of
    the code it runs in the user cache, not in the learner's folder. A program that imports jaxintro keeps its own."""
    if "jax" in sys.modules:
        return
    import jax
    from hypothesis.configuration import set_hypothesis_home_dir

    jax.config.update("jax_platforms", "cpu")
    hypothesis_home = default_cache_dir() / "hypothesis"
    with contextlib.suppress(OSError):
        hypothesis_home.mkdir(parents=True, exist_ok=True)
    set_hypothesis_home_dir(hypothesis_home)


def _check_each(learner: Learner, items: list[tuple[Exercise, Path]], timeout: float, proc: subprocess.Popen,
                stderr: "_Drain") -> list[Verdict]:
    """Each file's verdict, until the child stops: the exercises after the one it stopped at are not checked."""
    verdicts = []
    for exercise, path in items:
        notice = threading.Timer(STILL_RUNNING_SECONDS, _still_running, (path.name, timeout))
        notice.daemon = True
        if timeout > STILL_RUNNING_SECONDS:
            notice.start()
        try:
            verdicts.append(check(learner, exercise, path, timeout))
        except ProberGone as gone:
            if gone.why != "ended":
                _kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=REAP_SECONDS)
            stderr.join(timeout=REAP_SECONDS if gone.why == "ended" else 0)  # its last words, if it ended itself
            verdicts.append(_stopped(exercise, gone.why, timeout, proc.returncode, stderr.text()))
            break
        finally:
            notice.cancel()
    return verdicts


def _still_running(name: str, timeout: float) -> None:
    print(_("{file} is still being checked after {seconds} s: a check takes a few seconds, so is there a loop that "
            "never ends? It is stopped at {timeout:g} s (--timeout); Ctrl-C stops it now").format(
        file=name, seconds=STILL_RUNNING_SECONDS, timeout=timeout), file=sys.stderr, flush=True)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _end_the_check(proc: subprocess.Popen, children_before: set[int], stderr: "_Drain") -> None:
    """End every process of the check, even after a clean exit: the child's group holds what the learner's code
    started, and what it detached from that group (setsid) is found as a descendant."""
    _kill_group(proc)
    end_descendants(proc, children_before)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=REAP_SECONDS)
    # Once more, the child gone: a descendant killed while the child was still exiting was handed to this process as
    # it exited, after the look above, and is reaped here (on a loaded machine it outlived the check as a zombie).
    end_descendants(proc, children_before)
    stderr.join(timeout=REAP_SECONDS)


@contextlib.contextmanager
def adopting_orphans() -> Iterator[set[int]]:
    """While the check runs, this process adopts the orphans of its descendants (Linux): a process the learner's code
    detached (`setsid`, then its parent exits) stays a descendant, which `end_descendants` finds. Yields the children
    this process had before, which are not the check's."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    before = set(_children_of(os.getpid(), _parents()))
    if libc is not None:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield before
    finally:
        if libc is not None:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def end_descendants(proc: subprocess.Popen, before: set[int]) -> None:
    """SIGKILL every process of the check: the child's descendants, and the orphans this process adopted since it
    started the child (each frozen first, so that none forks again meanwhile); the adopted ones are reaped here."""
    for _round in range(20):  # a process dies between two looks: look again until none is left
        parents = _parents()
        adopted = [pid for pid in _children_of(os.getpid(), parents) if pid not in before and pid != proc.pid]
        doomed = [pid for root in (proc.pid, *adopted) for pid in _descendants(root, parents)] + adopted
        if not doomed:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in doomed:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        for pid in adopted:  # ours now: reaped by pid (a wait for any child would take proc's exit status)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc (empty where there is none: elsewhere the process group is all we end)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # `pid (comm) state ppid ...`: the command may hold spaces and parentheses, so split after the last ")".
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _children_of(pid: int, parents: dict[int, int]) -> list[int]:
    return [child for child, parent in parents.items() if parent == pid]


def _descendants(pid: int, parents: dict[int, int]) -> list[int]:
    """`pid`'s children, their children, and so on (not `pid` itself)."""
    found, frontier = [], [pid]
    while frontier:
        children = [child for parent in frontier for child in _children_of(parent, parents)]
        found += children
        frontier = children
    return found


def _stopped(exercise: Exercise, why: str, timeout: float, code: int | None, stderr: str) -> Verdict:
    """The verdict for the exercise the child was checking when it stopped (or was stopped)."""
    if why == "timeout":
        return Verdict.failed(exercise, "timeout", _(
            "the check did not finish within {seconds:g} s: is there a loop that never ends?").format(seconds=timeout))
    if why == "garbled":
        return Verdict.failed(exercise, "garbled", _(
            "the answers of the process that runs your file came back garbled: does your file write to file "
            "descriptors it did not open (os.write)?"))
    last = (stderr.strip().splitlines() or [""])[-1][:200] or _("nothing on stderr (does your file call os._exit?)")
    if code == 0:
        return Verdict.failed(exercise, "exited", _(
            "your file ended the process that runs it (exit code {code}) before its checks finished: remove the "
            "os._exit, sys.exit or exit() call (a file of functions is imported, not run)").format(code=code))
    return Verdict.failed(exercise, "crashed", _(
        "the process that runs your file stopped (exit code {code}) while it was checked: {last}").format(
        code=code, last=last))


class _Drain(threading.Thread):
    """Read a pipe to its end, keeping its last `STDERR_KEPT` bytes (a crash explains itself last)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.pipe, self.kept = pipe, bytearray()
        self.start()

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read(65536), b""):
            self.kept = (self.kept + chunk)[-STDERR_KEPT:]
        self.pipe.close()

    def text(self) -> str:
        """What was kept, as text."""
        return self.kept.decode("utf-8", "replace")
