"""Run an exercise's checks on the learner's file: in this process (`check_file`), or in a child with a time limit.

The child (`python -I -m jaxintro.exercises.runner --out-fd FD N=PATH ...`) checks one file after
another and writes one JSON verdict per line to the pipe FD as each finishes, so a time-out or a
crash still leaves the verdicts before it. The parent (`check_in_child`) reads the child's stdout and
stderr into bounded buffers (a file that prints without end cannot fill a pipe or the memory),
waits at most the time limit, and in `finally` ends every process of the check: the child's process
group and, on Linux, every descendant, those the learner's code detached too (`setsid`, a double
fork: the parent adopts orphans while the check runs, `PR_SET_CHILD_SUBREAPER`). An infinite loop, a
crash or Ctrl-C never leaves a process behind. The child has its own session, so a Ctrl-C in the
terminal reaches the parent only, which then stops the child.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import importlib
import io
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import IO, Callable

from jaxintro.data import default_cache_dir
from jaxintro.exercises.catalog import EXERCISES, SOLUTIONS, Exercise
from jaxintro.exercises.sandbox import refuse_reading
from jaxintro.i18n import _, set_language

OUTPUT_KEPT = 4000  # characters of the learner's own output kept for the verdict
FLOOD = 2000  # more printed than this is worth a note
VERDICTS_KEPT = 4 << 20  # bytes of the verdict pipe read (a verdict line is about 5 KB)
REAP_SECONDS = 5  # after the child is killed: how long its pipes may take to close
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphans of this process's descendants are re-parented to it, not to init
_CHECK_MODULES = {range(1, 5): "checks_build", range(5, 11): "checks_puzzles", range(11, 16): "checks_lesson"}


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

    @classmethod
    def failed(cls, exercise: Exercise, key: str, message: str) -> "Verdict":
        """A failure of `exercise`."""
        return cls(exercise.number, exercise.slug, False, key, message)


# How a traced value prints (print() of an array inside jax.jit, at trace time): JitTracer(float32[3]), Traced<...>.
_TRACER = re.compile(r"Traced<[^>]*>|\b\w*Tracer\([^)]*\)")


class BoundedText(io.TextIOBase):
    """A text sink that keeps the first `OUTPUT_KEPT` characters and counts the rest (and sees a printed tracer)."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.count = 0
        self.tracer = ""

    def write(self, text: str) -> int:
        if not self.tracer and (found := _TRACER.search(text)):
            self.tracer = found[0]
        if self.count < OUTPUT_KEPT:
            self.kept.append(text[: OUTPUT_KEPT - self.count])
        self.count += len(text)
        return len(text)

    def text(self) -> str:
        """What was kept."""
        return "".join(self.kept)


def check_function(exercise: Exercise) -> Callable[[dict], None]:
    """The check of `exercise` (imports JAX)."""
    module = next(name for numbers, name in _CHECK_MODULES.items() if exercise.number in numbers)
    return getattr(importlib.import_module(f"jaxintro.exercises.{module}"), f"check_{exercise.slug}")


def load(path: Path) -> dict:
    """Run the learner's file as a module; its namespace."""
    source = path.read_text(encoding="utf-8")
    module = types.ModuleType(f"exercise_{path.stem}")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # the learner's own file, run as `python FILE` would
    return module.__dict__


def check_file(exercise: Exercise, path: Path) -> Verdict:
    """Load `path` and run `exercise`'s checks on it, here; the learner's prints are captured, not shown."""
    from jaxintro.exercises.checking import CheckFailed, learner_file, learner_line

    import jax

    captured = BoundedText()
    folder = path.parent.resolve()
    before, x64 = _listing(folder), jax.config.jax_enable_x64
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured), learner_file(str(path)):
        try:
            namespace = load(path)
        except SyntaxError as exc:
            verdict = Verdict.failed(exercise, "syntax_error", _("syntax error at line {line} of {file}: {error}").format(
                line=exc.lineno, file=path.name, error=exc.msg))
        except (Exception, SystemExit) as exc:
            verdict = Verdict.failed(exercise, "import_error", _(
                "{file} raised {error} at line {line} while loading: {detail}").format(
                file=path.name, error=type(exc).__name__, line=learner_line(exc) or "?",
                detail=(str(exc).splitlines() or [""])[0][:200]))
        else:
            missing = [name for name in exercise.functions if not callable(namespace.get(name))]
            if missing:
                verdict = Verdict.failed(exercise, "missing_function", _(
                    "{file} defines no function {name}: keep the name and signature of the starter file").format(
                    file=path.name, name=missing[0]))
            else:
                check = check_function(exercise)  # outside the `try`: a missing check is our bug, not theirs
                try:
                    # Full float32 matmuls on every backend (a GPU's default TF32 would miss our tolerances).
                    with jax.default_matmul_precision("highest"):
                        check(namespace)
                    verdict = Verdict(exercise.number, exercise.slug, True)
                except CheckFailed as exc:
                    verdict = Verdict.failed(exercise, exc.key, exc.message)
                except Exception as exc:  # what the learner's code returned broke a comparison
                    verdict = Verdict.failed(exercise, "unexpected", _(
                        "the check could not use what your code returned ({error}: {detail})").format(
                        error=type(exc).__name__, detail=(str(exc).splitlines() or [""])[0][:200]))
    verdict.printed, verdict.output = captured.count, captured.text()
    verdict.notes = silent_mistakes(captured, x64, before, folder)
    return verdict


def _listing(folder: Path) -> set[Path] | None:
    """The files in `folder` (None: it cannot be listed, and nothing is said of what was written)."""
    try:
        return set(folder.iterdir())
    except OSError:
        return None


def silent_mistakes(captured: BoundedText, x64: bool, before: set[Path] | None, folder: Path) -> list[str]:
    """What the learner's file did that no check fails but the lesson would not do: each as a note."""
    import jax

    notes = []
    if captured.tracer:
        notes.append(_("your file printed a traced value ({seen}): under jax.jit, print runs once while the function "
                       "is traced and shows no numbers; jax.debug.print(\"x = {{x}}\", x=x) prints the values at "
                       "every call").format(seen=captured.tracer))
    if jax.config.jax_enable_x64 != x64:
        jax.config.update("jax_enable_x64", x64)  # the next file is checked as the lesson computes: in float32
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


def check_in_child(items: list[tuple[Exercise, Path]], lang: str, *, timeout: float) -> list[Verdict]:
    """Check each (exercise, file) in one child process, within `timeout` seconds per exercise.

    The child and everything the learner's code starts are killed when the checks end, and no wait is
    unbounded: a process that outlives its group (a learner's `Popen` holding our pipes) delays nothing.
    """
    read_end, write_end = os.pipe()  # the verdicts come back on their own pipe, apart from the learner's prints
    command = [sys.executable, "-I", "-m", "jaxintro.exercises.runner", "--lang", lang, "--out-fd", str(write_end),
               *[f"{exercise.number}={path}" for exercise, path in items]]
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")  # tiny inputs: the CPU starts fastest; the learner may choose
    # Each verdict line starts with this run's token, sent on stdin (neither argv nor the environment shows it):
    # a stray line on the pipe is not taken for a verdict.
    token = secrets.token_hex(16)
    with adopting_orphans() as before:
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, start_new_session=True, pass_fds=(write_end,))
        finally:
            os.close(write_end)  # the child holds it now: the pipe ends when the child does
        return _await_verdicts(proc, token, items, timeout, read_end, before)


def _await_verdicts(proc: subprocess.Popen, token: str, items: list[tuple[Exercise, Path]], timeout: float,
                    read_end: int, before: set[int]) -> list[Verdict]:
    """Send the token, read the child's output and verdicts within the time limit, then end every process of it."""
    with contextlib.suppress(OSError):
        proc.stdin.write(token.encode() + b"\n")
        proc.stdin.close()
    readers = [_Drain(proc.stdout), _Drain(proc.stderr)]
    results = _Drain(os.fdopen(read_end, "rb"), keep=VERDICTS_KEPT)
    timed_out = False
    try:
        proc.wait(timeout=timeout * len(items))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Always, even after a clean exit: the child's group holds what the learner's code started.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        end_descendants(proc, before)  # and what it detached from that group (setsid), which holds our pipes
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=REAP_SECONDS)
        for reader in (*readers, results):
            reader.join(timeout=REAP_SECONDS)
    found = parse_verdicts(results.text(), token, items)
    verdicts = []
    for exercise, _path in items:
        if exercise.number in found:
            verdicts.append(found[exercise.number])
            continue
        verdicts.append(_stopped(exercise, timed_out, timeout, proc.returncode, readers[1].text()))
        break  # the exercises after the one that stopped the child were not checked
    return verdicts


@contextlib.contextmanager
def adopting_orphans():
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


def parse_verdicts(text: str, token: str, items: list[tuple[Exercise, Path]]) -> dict[int, Verdict]:
    """The first well-formed verdict of this run for each exercise checked; stray or garbled lines are ignored."""
    wanted, found = {exercise.number for exercise, _path in items}, {}
    for line in text.splitlines():
        mark, _space, body = line.partition(" ")
        if mark != token:
            continue
        try:
            verdict = Verdict(**json.loads(body))
        except (ValueError, TypeError, RecursionError):
            continue
        if type(verdict.number) is int and type(verdict.passed) is bool and verdict.number in wanted:
            found.setdefault(verdict.number, verdict)
    return found


def _stopped(exercise: Exercise, timed_out: bool, timeout: float, code: int | None, stderr: str) -> Verdict:
    """The verdict for the exercise the child was checking when it stopped (or was stopped)."""
    if timed_out:
        return Verdict.failed(exercise, "timeout", _(
            "the check did not finish within {seconds:g} s: is there a loop that never ends?").format(seconds=timeout))
    last = (stderr.strip().splitlines() or [""])[-1][:200] or _("nothing on stderr (does your file call os._exit?)")
    if code == 0:
        return Verdict.failed(exercise, "exited", _(
            "your file ended the checking process (exit code {code}) before its checks finished: remove the "
            "os._exit, sys.exit or exit() call (a file of functions is imported, not run)").format(code=code))
    return Verdict.failed(exercise, "crashed", _(
        "the checking process stopped (exit code {code}) while checking this file: {last}").format(
        code=code, last=last))


class _Drain(threading.Thread):
    """Read a pipe to its end, keeping its first `keep` bytes (all of them when `keep` is None)."""

    def __init__(self, pipe: IO[bytes], keep: int | None = OUTPUT_KEPT) -> None:
        super().__init__(daemon=True)
        self.pipe, self.keep, self.kept = pipe, keep, bytearray()
        self.start()

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read(65536), b""):
            if self.keep is None:
                self.kept += chunk
            elif len(self.kept) < self.keep:
                self.kept += chunk[: self.keep - len(self.kept)]
        self.pipe.close()

    def text(self) -> str:
        """What was kept, as text."""
        return self.kept.decode("utf-8", "replace")


class SolutionGuard:
    """An audit hook that refuses the learner's code the shipped solutions' folder and every file in it, and
    remembers the attempt, so that a pass by their text is no pass. The checks read none of them; `exercises
    solution N` reads them in the parent process, where no learner's code runs. It sees Python's own opens (`open`,
    `importlib`, `os.open`), not a `cat` the file starts or libc through `ctypes`: those the kernel refuses where it
    has Landlock (`sandbox.refuse_reading`); the checks share the learner's process (docs/reliability.md)."""

    def __init__(self, folder: Path = SOLUTIONS) -> None:
        self.folder = os.path.realpath(folder)
        self.opened: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):  # an int: an open descriptor
            return
        path = os.path.realpath(os.fsdecode(args[0]))
        if path == self.folder or path.startswith(self.folder + os.sep):  # the folder too: `os.open(name, dir_fd=)`
            self.opened.append(path)
            raise PermissionError(_("the shipped solutions are not for the code being checked: {path}").format(
                path=path))

    def judge(self, exercise: Exercise, verdict: Verdict) -> Verdict:
        """`verdict`, unless the learner's code tried to read a shipped solution since the last verdict."""
        opened, self.opened = self.opened, []
        if not opened:
            return verdict
        # The folder by its name; a file by its source's (a .pyc of it too).
        name = "solutions/" if opened[0] == self.folder else Path(opened[0]).name.split(".")[0] + ".py"
        return dataclasses.replace(Verdict.failed(exercise, "reads_solution", _(
            "your file opened the shipped solution {name}: write the function yourself (`jaxintro exercises "
            "solution {n}` shows it to read, not to run)").format(name=name, n=exercise.number)),
            printed=verdict.printed, output=verdict.output, notes=verdict.notes)


def main(argv: list[str] | None = None) -> int:
    """The child: check each `N=PATH`, writing one JSON verdict per line to the pipe `--out-fd`."""
    parser = argparse.ArgumentParser(prog="python -m jaxintro.exercises.runner")
    parser.add_argument("--lang", default=None)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("items", nargs="+", metavar="N=PATH")
    args = parser.parse_args(argv)
    token = sys.stdin.readline().strip()  # before any of the learner's code runs
    os.set_inheritable(args.out_fd, False)  # nothing the learner's code starts can write verdicts
    set_language(args.lang)
    from hypothesis.configuration import set_hypothesis_home_dir

    # Hypothesis caches what it learns of the code it runs; in the user cache, not the learner's folder. Made now:
    # once reading is restricted, a folder created later beside the path to the solutions could not be read.
    hypothesis_home = default_cache_dir() / "hypothesis"
    with contextlib.suppress(OSError):
        hypothesis_home.mkdir(parents=True, exist_ok=True)
    set_hypothesis_home_dir(hypothesis_home)
    guard = SolutionGuard()
    sys.addaudithook(guard)
    refuse_reading(SOLUTIONS)  # the kernel's refusal, for every process of the check, where it has Landlock
    with os.fdopen(args.out_fd, "w", encoding="utf-8") as out:
        for item in args.items:
            number, path = item.split("=", 1)
            exercise = EXERCISES[int(number) - 1]
            verdict = guard.judge(exercise, check_file(exercise, Path(path)))
            out.write(f"{token} {json.dumps(dataclasses.asdict(verdict))}\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
