"""The learner's side of a check: run their file, call its functions as asked, and say what happened; judge nothing.

The checker (`runner.py`) sends a request at a time: load a file, call one of its functions (under
`jax.jit`, `jax.vmap` or `jax.grad` where asked, with stand-ins the check built: `Prop`), count the
operations of its program, or report what the file printed. The answer is data (`wire.py`): what the
call returned, or what it raised and at which line of the file. Every comparison, key and message is
made in the checker, against references it computes itself. As a child (`python -I -m
jaxintro.exercises.probe --in-fd A --out-fd B`) this process holds no check and no verdict: the
learner's code can make its own reports say what it likes (as it can make its functions return what it
likes), never change a check or read a verdict. `check_file` runs the same `Prober` in the checker's own
process, for tests.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import hashlib
import io
import os
import re
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable

from jaxintro.exercises import wire
from jaxintro.exercises.catalog import SOLUTIONS
from jaxintro.exercises.sandbox import ALWAYS_WRITABLE

OUTPUT_KEPT = 4000  # characters of the learner's own output kept for the verdict
MESSAGE_KEPT = 2000  # characters of what the learner's code raised kept for the checker
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


class FileGuard:
    """An audit hook that refuses the learner's code the shipped solutions' folder and every file in it (and remembers
    the attempt, which the checker fails), and any open for writing outside the folders it may write in. It sees
    Python's own opens (`open`, `importlib`, `os.open`), not a `cat` the file starts or libc through `ctypes`: those
    the kernel refuses where it has Landlock (`sandbox.confine`, docs/reliability.md)."""

    def __init__(self, folder: Path = SOLUTIONS, writable: tuple[Path, ...] | None = None) -> None:
        self.folder = os.path.realpath(folder)
        self.opened: list[str] = []
        # Where an open may write (None: anywhere, as in the checker's own process).
        self.writable = None if writable is None else [os.path.realpath(p) for p in (*writable, *ALWAYS_WRITABLE)]

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):  # an int: an open descriptor
            return
        path = os.path.realpath(os.fsdecode(args[0]))
        if self.writable is not None and _writes(args) and not any(
                path == place or path.startswith(place + os.sep) for place in self.writable):
            raise PermissionError(f"a checked file writes only in its folder and the check's temp folder: {path}")
        if path == self.folder or path.startswith(self.folder + os.sep):  # the folder too: `os.open(name, dir_fd=)`
            self.opened.append("solutions/" if path == self.folder else Path(path).name.split(".")[0] + ".py")
            raise PermissionError(f"the shipped solutions are not for the code being checked: {path}")

    def take(self) -> list[str]:
        """The solutions opened since the last call."""
        opened, self.opened = self.opened, []
        return opened


def _writes(args: tuple) -> bool:
    """Whether an audited `open` (path, mode, flags) asks to write, create, append or truncate."""
    mode, flags = (args + (None, None))[1:3]
    written = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    return bool(isinstance(mode, str) and set(mode) & set("wax+")) or bool(isinstance(flags, int) and flags & written)


class Prober:
    """Runs one learner's file at a time and answers the checker's requests about it (`answer`)."""

    def __init__(self, guard: FileGuard | None = None) -> None:
        self.guard = guard
        self.namespace: dict = {}
        self.path = ""
        self.held: list[Any] = []  # objects the checker has a Handle to
        self.functions: dict[bytes, Callable] = {}  # the file's functions as transformed so far
        self.captured = BoundedText()
        self.x64 = False

    def answer(self, message: bytes) -> bytes:
        """The answer to one request (both are `wire` messages)."""
        built: list = []  # the props of this request, in the order the checker sent them

        def build(prop: dict) -> Any:
            built.append(build_prop(prop))
            return built[-1]

        request = wire.unpack(message, handle=lambda h: self.held[h["h"]], prop=build)
        op = request["op"]
        if op == "load":
            return wire.pack(self.load(Path(request["path"])))
        if op == "report":
            return wire.pack(self.report())
        args, kwargs = request["args"], request["kwargs"]
        with self._learners_turn():
            try:
                fn = self._function(request)
                if op == "jitted":
                    value = hasattr(fn, "lower")
                elif op == "size":
                    import jax

                    value = len(jax.make_jaxpr(fn)(*args, **kwargs).eqns)
                elif op == "primitives":
                    import jax

                    value = dict(primitive_counts(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr))
                elif op == "flops":
                    import jax

                    cost = jax.jit(fn).lower(*args, **kwargs).cost_analysis()  # of the program as traced: no compile
                    value = float((cost[0] if isinstance(cost, list) else cost or {}).get("flops", -1.0))
                elif op == "calls":
                    value = shapes_seen(self.namespace.get(request["inner"]), lambda: fn(*args, **kwargs))
                else:
                    if request["return_args"]:
                        import jax

                        given = jax.tree.leaves(args)  # the very objects, to tell a leaf the call put in place of one
                    with jits_counted(built, self.namespace):
                        value = fn(*args, **kwargs)
                    value = (value, replaced_marked(given, args)) if request["return_args"] else value
                reply = {"value": value}
            except (Exception, SystemExit) as exc:  # the learner's code raised: described, for the checker to judge
                reply = {"raised": self.describe_raised(exc)}
                if reply["raised"]["line"] is None and type(exc).__name__ == "KeyReuseError":
                    line = self._key_reuse_line(request, args, kwargs)
                    reply["raised"].update(line=line, source=self.source_line(line))
        reply["observed"] = [p.observed() if isinstance(p, Stand) else {} for p in built]
        answer = wire.pack(reply, hold=self._hold)
        if not wire.fits(answer) and "value" in reply:  # a value too big to send stays here, as a Handle
            answer = wire.pack({**reply, "value": wire.Hold(reply["value"])}, hold=self._hold)
        return answer

    def _function(self, request: dict) -> Callable:
        """The file's function (or a helper) under the request's transformations, made once per file and chain, so
        that a jitted function compiles once per shape, as one `jax.jit` object does."""
        key = hashlib.sha1(wire.pack({k: request[k] for k in ("name", "helper", "chain")})).digest()
        if key not in self.functions:
            self.functions[key] = transformed(self._target(request), request["chain"])
        return self.functions[key]

    def _key_reuse_line(self, request: dict, args: tuple, kwargs: dict) -> int | None:
        """The learner's line that reused a key, found by running the call again without `jit`: under `jit` JAX finds
        the reuse in the traced program, after the learner's Python has returned, so its traceback names no line."""
        import jax

        eager = [step for step in request["chain"] if step[0] != "jit"]
        fresh = lambda leaf: jax.random.clone(leaf) if _is_key(leaf) else leaf  # noqa: E731 (the first run consumed them)
        try:
            transformed(self._target(request), eager)(*jax.tree.map(fresh, args), **jax.tree.map(fresh, kwargs))
        except Exception as exc:  # noqa: BLE001 (whatever it raises, only its line is wanted)
            return self.describe_raised(exc)["line"]
        return None

    def _target(self, request: dict) -> Callable:
        name = request["name"]
        return functools.partial(HELPERS[name], self.namespace) if request["helper"] else self.namespace[name]

    def load(self, path: Path) -> dict:
        """Run the learner's file as a module, as `import` would (`__name__` is not "__main__"); what came of it."""
        import jax

        self.namespace, self.path, self.held, self.functions = {}, str(path), [], {}
        self.captured, self.x64 = BoundedText(), jax.config.jax_enable_x64
        with self._learners_turn():
            try:
                source = path.read_text(encoding="utf-8")
                module = types.ModuleType(f"exercise_{path.stem}")
                module.__file__ = str(path)
                exec(compile(source, str(path), "exec"), module.__dict__)  # the learner's own file
            except SyntaxError as exc:
                return {"syntax_error": {"line": exc.lineno, "message": str(exc.msg)}}
            except (Exception, SystemExit) as exc:
                return {"raised": self.describe_raised(exc)}
        self.namespace = module.__dict__
        return {"callables": sorted(name for name, value in self.namespace.items() if callable(value))}

    def report(self) -> dict:
        """What the file printed, whether it turned on float64 (turned off again here), which solutions it opened, which
        of its globals hold a tracer."""
        import jax

        x64 = jax.config.jax_enable_x64
        if x64 != self.x64:
            jax.config.update("jax_enable_x64", self.x64)  # the next file is checked as the lesson computes
        opened = self.guard.take() if self.guard else []
        return {"printed": self.captured.count, "output": self.captured.text(), "tracer": self.captured.tracer,
                "x64": x64 != self.x64, "opened": opened, "traced_globals": traced_globals(self.namespace)}

    def describe_raised(self, exc: BaseException) -> dict:
        """What the learner's code raised: its type and bases' names, message, last line in the file, functions."""
        frames = traceback.extract_tb(exc.__traceback__)
        lines = [f.lineno for f in frames if f.filename == self.path]
        try:
            message = str(exc)[:MESSAGE_KEPT]
        except Exception:  # noqa: BLE001 (an exception whose __str__ raises)
            message = ""
        line = lines[-1] if lines else None
        return {"type": type(exc).__name__, "kinds": [c.__name__ for c in type(exc).__mro__], "message": message,
                "line": line, "source": self.source_line(line), "functions": [f.name for f in frames]}

    def source_line(self, line: int | None) -> str:
        """The text of line `line` of the learner's file ("" for none): what a message may quote of their code."""
        if line is None:
            return ""
        import linecache

        return linecache.getline(self.path, line).strip()[:200]

    @contextlib.contextmanager
    def _learners_turn(self):
        """While the learner's code runs: its prints captured, full float32 matmuls on every backend (a GPU's default
        TF32 would miss the checks' tolerances), and JAX's own key-reuse checker on: a typed key (`jax.random.key`)
        used twice raises `KeyReuseError`, eagerly and under `jit` (a legacy `PRNGKey`, a plain uint32 array, is
        not checked)."""
        import jax

        with contextlib.redirect_stdout(self.captured), contextlib.redirect_stderr(self.captured), \
                jax.default_matmul_precision("highest"), jax.debug_key_reuse(True):
            yield

    def _hold(self, value: Any) -> int:
        self.held.append(value)
        return len(self.held) - 1


def _is_key(leaf: Any) -> bool:
    import jax

    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def primitive_counts(jaxpr: Any) -> collections.Counter:
    """How many times each primitive appears in a traced program, its sub-programs included (a `jit`'s body, `cond`'s
    branches, `scan`'s step): what says which transformation the learner's code used, and how often it multiplies."""
    from jax.extend.core import jaxprs_in_params

    found = collections.Counter()
    for eqn in jaxpr.eqns:
        found[eqn.primitive.name] += 1
        if eqn.primitive.name == "dot_general" and eqn.params["dimension_numbers"][1][0]:
            found["dot_general with batch dimensions"] += 1  # a product per example, of arrays mapped by vmap
        for inner in jaxprs_in_params(eqn.params):
            found += primitive_counts(inner)
    return found


def traced_globals(namespace: dict) -> list[str]:
    """The names of the file's globals that hold a tracer, alone or in a list, tuple or dict: what a jitted function
    stored there while it was traced (`global last_loss`, `history.append(loss)`), a placeholder and no number."""
    import jax

    def holds_tracer(value: Any) -> bool:
        try:
            return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value))
        except Exception:  # noqa: BLE001 (a container jax.tree cannot walk holds nothing it traced)
            return False

    return sorted(name for name, value in namespace.items() if not name.startswith("__")
                  and isinstance(value, (jax.core.Tracer, list, tuple, dict)) and holds_tracer(value))


def shapes_seen(inner: Any, run: Callable[[], Any]) -> list[list[list[int]]]:
    """The shapes of `inner`'s positional arguments at each call made while `run()` runs, traced calls included (under
    `vmap` a tracer has one example's shape): how a check sees whether a function was mapped or called on the batch."""
    code = getattr(inner, "__code__", None)
    seen: list[list[list[int]]] = []

    def profile(frame: types.FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            names = code.co_varnames[:code.co_argcount]
            seen.append([list(getattr(frame.f_locals[name], "shape", ())) for name in names])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return seen


def transformed(fn: Callable, chain: list) -> Callable:
    """`fn` under the transformations `chain` names, innermost first: [["jit", {"static_argnums": 1}], ...] (and
    ["partial", {"args": [...], "kwargs": {...}}])."""
    import jax

    for name, options in chain:
        if name == "partial":  # arguments fixed, as a closure over them would: constants under jit
            fn = functools.partial(fn, *options["args"], **options["kwargs"])
        elif name == "keys_unchecked":
            fn = _without_key_checks(fn)
        else:
            fn = {"jit": jax.jit, "vmap": jax.vmap, "grad": jax.grad}[name](fn, **options)
    return fn


def _without_key_checks(fn: Callable) -> Callable:
    """`fn`, run (and traced) with JAX's key-reuse checker off."""
    import jax

    @functools.wraps(fn)
    def unchecked(*args, **kwargs):
        with jax.debug_key_reuse(False):
            return fn(*args, **kwargs)

    return unchecked


class Stand:
    """A stand-in the checker asked for (a `wire.Prop`), which records what the learner's code did with it."""

    def observed(self) -> dict:
        return {}


class JitCounted(Stand):
    """A stand-in that counts how many `jax.jit` of it the learner's code made during the call (`jits_counted`)."""

    jit_wraps = 0

    def observed(self) -> dict:
        return {"jit_wraps": self.jit_wraps}


class FakeJitted(JitCounted):
    """A stand-in for a jitted function whose cost the checker knows (exercise 14).

    Its first call "compiles" (`compile_s`, synchronous, as tracing and compiling are); every call
    then returns at once, with a result that is ready `work_s` later, and calls queue behind each
    other as they do on a device (asynchronous dispatch). So an honest timing measures `work_s`
    per call; one without a warm-up adds compile_s / repeats; one that never waits measures ~0.
    """

    def __init__(self, compile_s: float, work_s: float, spread: tuple[float, ...] = (1.0,), pair: bool = False) -> None:
        self.compile_s, self.work_s, self.spread = compile_s, work_s, tuple(spread)  # call k works work_s * spread[k % n]
        self.pair = pair  # results as (array, number), as a function returning a loss and more does
        self.calls = self.waits = 0
        self.busy_until = 0.0
        self.first: FakeResult | None = None
        self.warm_up_waited = True  # the first result was waited for before the second call

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.compile_s)
        elif self.calls == 2:
            self.warm_up_waited = self.first is not None and self.first.waited
        self.busy_until = max(time.perf_counter(), self.busy_until) + self.work_s * self.spread[self.calls % len(self.spread)]
        result = FakeResult(self, self.busy_until)
        self.first = self.first or result
        return (result, 0.0) if self.pair else result

    def observed(self) -> dict:
        return {**super().observed(), "calls": self.calls, "waits": self.waits,
                "warm_up_waited": self.warm_up_waited}


class FakeResult:
    """A result that is ready at `ready_at`; `block_until_ready` waits until then."""

    def __init__(self, owner: FakeJitted, ready_at: float) -> None:
        self.owner, self.ready_at = owner, ready_at
        self.waited = False

    def block_until_ready(self) -> "FakeResult":
        self.owner.waits += 1
        self.waited = True
        time.sleep(max(0.0, self.ready_at - time.perf_counter()))
        return self


class SlowWithoutJit(JitCounted):
    """f(x) = tanh(x) @ tanh(x).T, which sleeps `eager_s` whenever it runs without jit (exercise 14's compare_jit),
    and records each run: traced (inside jax.jit) or not."""

    def __init__(self, eager_s: float) -> None:
        self.eager_s, self.runs = eager_s, []

    def __call__(self, x):
        import jax
        import jax.numpy as jnp

        traced = isinstance(x, jax.core.Tracer)
        self.runs.append(traced)
        if not traced:  # without jit every call runs this Python; a jitted call skips it
            time.sleep(self.eager_s)
        return jnp.tanh(x) @ jnp.tanh(x).T

    def observed(self) -> dict:
        return {**super().observed(), "runs": self.runs}


REPLACED = "replaced by the call"  # a leaf of the arguments that the call swapped for another object


def replaced_marked(given: list, args: Any) -> Any:
    """`args` as the call left them, each leaf it swapped for another object written as REPLACED, whatever its value:
    `params["b"] = params["b"] + 0.0` changes the caller's dict though every value stays (a container whose shape
    changed is left to its values to tell)."""
    import jax

    leaves, tree = jax.tree.flatten(args)
    if len(leaves) != len(given):
        return args
    return jax.tree.unflatten(tree, [leaf if leaf is old else REPLACED for old, leaf in zip(given, leaves)])


@contextlib.contextmanager
def jits_counted(stands: list, namespace: dict) -> Any:
    """For one call: `jax.jit` counting the wraps of each stand-in that counts them, then the real `jax.jit`.

    Put in place as `jax.jit`, which the file's `jax.jit(f)` looks up when it runs, and under each name of the file
    bound to it (`from jax import jit`); a name bound in another way (an alias held in a class) keeps the real one.
    """
    import jax

    counting = [stand for stand in stands if isinstance(stand, JitCounted)]
    if not counting:
        yield
        return
    real = jax.jit

    @functools.wraps(real)
    def jit(*args: Any, **kwargs: Any) -> Any:  # `jax.jit(**options)` alone returns a decorator: no function yet
        for stand in counting:
            stand.jit_wraps += bool(args) and args[0] is stand
        return real(*args, **kwargs)

    names = [name for name, value in namespace.items() if value is real]
    jax.jit = jit
    namespace.update(dict.fromkeys(names, jit))
    try:
        yield
    finally:
        jax.jit = real
        namespace.update(dict.fromkeys(names, real))


OPTAX_PARTS = ("sgd", "adam", "adamw", "clip_by_global_norm")  # what an optimizer prop may be built of


def build_prop(request: dict) -> Any:
    """The stand-in or the object a `wire.Prop` asks for."""
    kind, spec = request["kind"], request["spec"]
    if kind == "fake_jitted":
        return FakeJitted(spec["compile_s"], spec["work_s"], spec["spread"], bool(spec.get("pair", False)))
    if kind == "slow_without_jit":
        return SlowWithoutJit(spec["eager_s"])
    if kind == "optax":
        return build_optimizer(spec["parts"])
    raise wire.Garbled(f"no prop {kind!r}")


def build_optimizer(parts: list) -> Any:
    """An Optax optimizer from [[name, args], ...]: one part as itself, several chained in order."""
    import optax

    unknown = [name for name, _args in parts if name not in OPTAX_PARTS]
    if unknown or not parts:
        raise wire.Garbled(f"not an optimizer's parts: {unknown or parts}")
    built = [getattr(optax, name)(*args) for name, args in parts]
    return built[0] if len(built) == 1 else optax.chain(*built)


# The checks' calls of the objects the file's code returned, made where they live.
def first_updates(ns: dict, tx: Any, grads: Any) -> Any:
    """Exercise 15: the updates an optimizer gives for `grads` from a fresh state (`ns` unused: every helper is
    given the file's namespace)."""
    updates, _state = tx.update(grads, tx.init(grads), grads)
    return updates


def loss_and_grad(ns: dict, params: Any, x: Any, y: Any) -> Any:
    """Exercise 4: one pass of `jax.value_and_grad` over the file's `loss_fn`, the measure of a step's products."""
    import jax

    return jax.value_and_grad(ns["loss_fn"])(params, x, y)


HELPERS: dict[str, Callable] = {"first_updates": first_updates, "loss_and_grad": loss_and_grad}


def main(argv: list[str] | None = None) -> int:
    """The child: answer requests from the pipe `--in-fd` on the pipe `--out-fd` until the first closes."""
    parser = argparse.ArgumentParser(prog="python -m jaxintro.exercises.probe")
    parser.add_argument("--in-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--write", type=Path, action="append", default=[], help="a folder the file may write in")
    args = parser.parse_args(argv)
    for fd in (args.in_fd, args.out_fd):
        os.set_inheritable(fd, False)  # nothing the learner's code starts holds the checker's pipes
    import jax  # noqa: F401 (now, once: JAX's start-up counts against the first file's time limit only)

    # The kernel's refusals were set before this interpreter started (`sandbox.main`, where it has Landlock); Python's
    # own, for Python's own opens, hold everywhere.
    guard = FileGuard(writable=tuple(args.write))
    sys.addaudithook(guard)
    prober = Prober(guard)
    with os.fdopen(args.in_fd, "rb") as requests, os.fdopen(args.out_fd, "wb") as answers:
        while (message := read_frame(requests)) is not None:
            write_frame(answers, prober.answer(message))
    return 0


def read_frame(stream: io.BufferedReader) -> bytes | None:
    """The next message on a blocking pipe (None at its end)."""
    head = stream.read(wire.HEAD_SIZE)
    if not head:
        return None
    return stream.read(wire.frame_length(head))


def write_frame(stream: io.BufferedWriter, message: bytes) -> None:
    """`message` on a blocking pipe, after its frame's head."""
    stream.write(wire.frame_head(message))
    stream.write(message)
    stream.flush()


if __name__ == "__main__":
    sys.exit(main())
