"""The checker's view of the learner's file: its functions as `Function`s whose calls cross to the process that runs it.

A check writes `ns["forward"].jit()(params, x)` where it would write `jax.jit(forward)(params, x)`:
the learner's process (`probe.py`) applies the transformation and makes the call; the value comes
back as data (`wire.py`), or, where the learner's code raised, a `LearnerRaised` that carries its
type, message and line. `InProcess` answers in this process (`check_file`, the tests); `Child`
answers from a child process, within a deadline, and a child that stops, hangs or garbles its
answers raises `ProberGone`, which no check catches.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from typing import Any

from jaxintro.exercises import wire
from jaxintro.exercises.probe import Prober


class LearnerRaised(Exception):
    """What the learner's code raised in its process: the type's name, the names of its classes (`kinds`), the
    message, the last line of their file it passed (None: it never ran there), the functions of its traceback, and
    that line's text (`source`, "" where unknown)."""

    def __init__(self, type_name: str, kinds: set[str], message: str, line: int | None, functions: list[str],
                 source: str = "") -> None:
        super().__init__(message)
        self.type_name, self.kinds, self.message, self.line, self.functions = type_name, kinds, message, line, functions
        self.source = source

    def first_line(self, limit: int = 200) -> str:
        """The message's first line, at most `limit` characters: what a verdict quotes of it."""
        return (self.message.strip().splitlines() or [""])[0][:limit]

    @classmethod
    def read(cls, raised: Any) -> "LearnerRaised":
        """From the child's description of it; ProberGone("garbled") if that is not one."""
        if not (type(raised) is dict and _strings(raised.get("kinds")) and _strings(raised.get("functions"))
                and _strings([raised.get("type"), raised.get("message"), raised.get("source", "")])
                and _line(raised.get("line"))):
            raise ProberGone("garbled")
        return cls(raised["type"], set(raised["kinds"]), raised["message"], raised["line"], raised["functions"],
                   raised.get("source", ""))


def _strings(value: Any) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _line(value: Any) -> bool:
    return value is None or type(value) is int


class ProberGone(BaseException):
    """The learner's process stopped answering: it ended, ran past the deadline, or garbled its answers. A
    BaseException, as KeyboardInterrupt is, so that a check's `except Exception` does not take it for a wrong answer."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why  # "ended", "timeout" or "garbled"


class Function:
    """One of the learner's functions (or a helper of `probe.py`, where the given code's objects live), under the
    transformations `chain`; calling it calls it there."""

    def __init__(self, learner: "Learner", name: str, *, helper: bool = False, chain: tuple = ()) -> None:
        self.learner, self.name, self.helper, self.chain = learner, name, helper, chain

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ask("call", args, kwargs)

    def _then(self, transform: str, options: dict) -> "Function":
        return Function(self.learner, self.name, helper=self.helper, chain=(*self.chain, [transform, options]))

    def partial(self, *args: Any, **kwargs: Any) -> "Function":
        """As `functools.partial(fn, *args, **kwargs)`: under `jit` these are constants, as a closure's are."""
        return self._then("partial", {"args": list(args), "kwargs": kwargs})

    def jit(self, **options: Any) -> "Function":
        """As `jax.jit(fn, **options)`."""
        return self._then("jit", options)

    def vmap(self, **options: Any) -> "Function":
        """As `jax.vmap(fn, **options)`."""
        return self._then("vmap", options)

    def grad(self, **options: Any) -> "Function":
        """As `jax.grad(fn, **options)`."""
        return self._then("grad", options)

    def keys_unchecked(self) -> "Function":
        """Without JAX's key-reuse checker, which is on for every other call: a check that reads what the keys drew
        (masks, noise) reads it first, since it says more than the checker's "consumed key"."""
        return self._then("keys_unchecked", {})

    def program_size(self, *args: Any) -> int:
        """How many operations it traces to on `args` (`len(jax.make_jaxpr(fn)(*args).eqns)`)."""
        return self._ask("size", args, {})

    def primitives(self, *args: Any, **kwargs: Any) -> set[str]:
        """The names of the primitives its traced program holds on `args`, its sub-programs' too (`scan`, `cond`...)."""
        return set(self.primitive_counts(*args, **kwargs))

    def primitive_counts(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """How many times each primitive appears in its traced program on `args`, sub-programs included."""
        counts = self._ask("primitives", args, kwargs)
        if not (type(counts) is dict and all(type(k) is str and type(v) is int for k, v in counts.items())):
            raise ProberGone("garbled")
        return counts

    def flops(self, *args: Any) -> float:
        """The floating-point operations XLA counts in its program on `args`, before compiling (-1: it counts none)."""
        flops = self._ask("flops", args, {})
        if type(flops) is not float:
            raise ProberGone("garbled")
        return flops

    def shapes_seen_by(self, inner: str, *args: Any) -> list[list[tuple[int, ...]]]:
        """Called on `args`: for each call of the file's function `inner` meanwhile (traced calls too), the shapes of
        its positional arguments (under `vmap`, one example's)."""
        calls = self._ask("calls", args, {}, inner=inner)
        if not (type(calls) is list and all(type(call) is list and all(
                type(shape) is list and all(type(n) is int for n in shape) for shape in call) for call in calls)):
            raise ProberGone("garbled")
        return [[tuple(shape) for shape in call] for call in calls]

    def call_returning_args(self, *args: Any) -> tuple[Any, tuple]:
        """Call it; what it returned, and its arguments as they are after the call (a pure function changes none), a
        leaf the call swapped for another object, even of equal value, as `probe.REPLACED`."""
        return self._ask("call", args, {}, return_args=True)

    def is_jitted(self) -> bool:
        """Whether it is a jitted function (has `.lower`, as `@jax.jit` gives)."""
        return self._ask("jitted", (), {}) is True

    def _ask(self, op: str, args: tuple, kwargs: dict, *, return_args: bool = False, inner: str = "") -> Any:
        # In the order the child builds them: the chain's (a `partial`'s arguments), then the call's.
        props = [leaf for leaf in wire.walk((list(self.chain), args, kwargs)) if isinstance(leaf, wire.Prop)]
        reply = self.learner.ask({"op": op, "name": self.name, "helper": self.helper, "chain": list(self.chain),
                                  "args": args, "kwargs": kwargs, "return_args": return_args, "inner": inner})
        observed = reply.get("observed")
        if not ("value" in reply or "raised" in reply) or type(observed) is not list or len(observed) != len(props):
            raise ProberGone("garbled")
        for prop, seen in zip(props, observed):
            prop.observed = seen if type(seen) is dict else {}
        if "raised" in reply:
            raise LearnerRaised.read(reply["raised"])
        return reply["value"]


class Learner:
    """A connection to the process that runs the learner's files: one at a time, each loaded with `load`."""

    def __init__(self, transport: "InProcess | Child") -> None:
        self.transport = transport
        self.deadline = float("inf")

    def ask(self, request: dict) -> dict:
        """The answer to `request` (within the deadline of the file being checked)."""
        answer = self.transport.exchange(wire.pack(request), self.deadline)
        try:
            return wire.unpack(answer, deadline=self.deadline)  # decoding counts against the file's time too
        except wire.Garbled as exc:
            raise ProberGone("garbled") from exc
        except wire.OutOfTime as exc:
            raise ProberGone("timeout") from exc

    def load(self, path: Path, timeout: float = float("inf")) -> dict:
        """Run the file at `path` there; {"callables": [...]}, {"syntax_error": ...} or {"raised": ...}. The file's
        checks must end within `timeout` seconds from now."""
        self.deadline = time.monotonic() + timeout
        loaded = self.ask({"op": "load", "path": str(path)})
        if "raised" in loaded:
            loaded["raised"] = LearnerRaised.read(loaded["raised"])
        elif not (_strings(loaded.get("callables")) or _syntax_error(loaded.get("syntax_error"))):
            raise ProberGone("garbled")
        return loaded

    def report(self) -> dict:
        """What the file printed, whether it turned on float64, the solutions it tried to open, its globals that
        hold a tracer."""
        report = self.ask({"op": "report"})
        if not (type(report.get("printed")) is int and type(report.get("output")) is str
                and type(report.get("tracer")) is str and type(report.get("x64")) is bool
                and _strings(report.get("opened")) and _strings(report.get("traced_globals"))):
            raise ProberGone("garbled")
        return report

    def __getitem__(self, name: str) -> Function:
        """The file's function `name` (a check reads `ns["forward"]`, as from the file's namespace)."""
        return Function(self, name)

    def helper(self, name: str) -> Function:
        """`probe.py`'s helper `name`, which uses the file's given code (its optimizer, its loss_fn)."""
        return Function(self, name, helper=True)


def _syntax_error(value: Any) -> bool:
    return type(value) is dict and type(value.get("message")) is str and _line(value.get("line"))


class InProcess:
    """Answers in this process: the learner's file runs here, with no deadline (`check_file`)."""

    def __init__(self) -> None:
        self.prober = Prober()

    def exchange(self, message: bytes, deadline: float) -> bytes:
        return self.prober.answer(message)


class Child:
    """Answers from a child process, through the pipes `requests` (ours to write) and `answers` (ours to read)."""

    def __init__(self, requests: int, answers: int) -> None:
        self.requests, self.answers = requests, answers
        os.set_blocking(requests, False)  # a child that reads nothing must not hold us past the deadline

    def exchange(self, message: bytes, deadline: float) -> bytes:
        self._write(wire.frame_head(message), deadline)
        self._write(message, deadline)
        try:
            length = wire.frame_length(self._read(wire.HEAD_SIZE, deadline))
        except wire.Garbled as exc:
            raise ProberGone("garbled") from exc
        return self._read(length, deadline)

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self.requests, deadline, write=True)
            try:
                view = view[os.write(self.requests, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError as exc:
                raise ProberGone("ended") from exc

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, left = [], size
        while left:
            self._wait(self.answers, deadline, write=False)
            chunk = os.read(self.answers, min(left, 1 << 20))
            if not chunk:
                raise ProberGone("ended")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    @staticmethod
    def _wait(fd: int, deadline: float, *, write: bool) -> None:
        """Until `fd` can be written (or read), or the deadline passes: ProberGone("timeout") then."""
        poller = select.poll()  # not select(): it takes no descriptor numbered 1024 or more
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if poller.poll(min(left, 3600) * 1000):
                return
        raise ProberGone("timeout")
