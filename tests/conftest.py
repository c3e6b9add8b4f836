"""Shared fixtures: the canonical MNIST beside the repo, tiny synthetic IDX data, a local HTTP server."""

from __future__ import annotations

import contextlib
import gc
import gzip
import http.server
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
from filelock import FileLock
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

import cpu_time
import mutation_order

# No example database: test runs leave nothing behind in the checkout (its home is set in pytest_configure).
settings.register_profile("jaxintro", database=None)
settings.load_profile("jaxintro")


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin has made its factory
def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis writes a cache of the tests' constants as soon as it collects them, into ./.hypothesis unless
    # told otherwise: into pytest's tmp folder instead, before any test module is imported.
    set_hypothesis_home_dir(str(config._tmp_path_factory.mktemp("hypothesis")))  # noqa: SLF001
    if mutation_order.measuring():  # mutmut's statistics run times the fixtures each mutant's run orders by
        config.pluginmanager.register(mutation_order, "mutation_order")
    if os.environ.get("CPU_TIME"):  # each test's CPU seconds, into that file (tests/cpu_time.py)
        config.pluginmanager.register(cpu_time, "cpu_time")
    if MUTATION:
        # A mutant's process is forked from one that imported JAX and every test: pytest's collections of garbage
        # as it ends (0.3 s, half of a quick mutant's time) would walk all of that. They walk what is new.
        gc.freeze()
    # Before any test module starts XLA, which reads its flags once per process: here (in pytest-xdist's workers too)
    # and in every process the tests start, which inherit the variables.
    flags = os.environ.get("XLA_FLAGS", "")
    if SUITE_XLA_FLAG not in flags.split():  # pytest-xdist's workers inherit the controller's
        os.environ["XLA_FLAGS"] = f"{flags} {SUITE_XLA_FLAG}".strip()
    os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "0"
    stale = [] if MUTATION else stale_catalogs()  # mutmut's copy of the package holds what it copied, not a build
    if stale:  # the Spanish tests would fail one by one, each naming a missing word rather than the cause
        pytest.exit(f"the compiled catalogs are missing or older than their .po ({', '.join(stale)}): run `make install`"
                    " (or `pybabel compile -d src/jaxintro/locale -D jaxintro`)", returncode=2)


def stale_catalogs() -> list[str]:
    """The `.po` files whose `.mo` (what gettext reads; built on install, not kept in git) is missing or older."""
    locale = Path(__file__).resolve().parent.parent / "src" / "jaxintro" / "locale"
    return [str(po.relative_to(locale)) for po in sorted(locale.glob("*/LC_MESSAGES/*.po"))
            if not po.with_suffix(".mo").exists() or po.with_suffix(".mo").stat().st_mtime < po.stat().st_mtime]


# How the suite's processes compile, beside JAX's `jax_disable_most_optimizations` (isolated_session), for what the
# tests run: many small programs, each for a moment. XLA emits element-wise code with its older emitter, whose programs
# compile with less CPU and run as correctly, a little slower; `torch.compile` (the benchmark's PyTorch row) writes
# plain loops instead of SIMD ones, which g++ compiles faster (measured in commit 648c44a's message). Every process of
# the suite keeps the flag, a user's compile too (`as_users_compile`): XLA reads it once per process, and a run trained
# in a test's own process is compared bit for bit with one trained in a process it starts. So the documented numbers
# the suite checks are computed with it (every check passed), and its trainings on full MNIST run a little slower
# (test_mnist_slow.py), where the rest of the suite gains far more. What a user runs (`make` commands) keeps XLA's
# defaults.
SUITE_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"

# A shell starts a background job with SIGINT ignored, and a child inherits that: a command under test would
# then never see the Ctrl-C a test sends it. Children start with SIGINT at its default, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from jaxintro.data import Dataset
from jaxintro.idx import sha256_hex

# Under `make mutation`: mutmut sets this in every process it runs the tests in, from its copy in mutants/.
MUTATION = "MUTANT_UNDER_TEST" in os.environ

REPO = Path(__file__).resolve().parents[1]
# Beside the checkout; `make mutation` runs the tests from mutants/, one folder deeper.
MNIST_DIR = next((d / "shared" / "data" / "mnist" for d in REPO.parents[:2] if (d / "shared" / "data").is_dir()),
                 REPO.parent / "shared" / "data" / "mnist")


def isolate_environment(monkeypatch: pytest.MonkeyPatch, cache: Path, compiled: Path | None = None) -> None:
    """An empty user cache, no inherited data folder, no reachable mirror, English: what every test starts from.

    Only the compile cache inside it (`jaxintro/xla/`) is `compiled`, one folder for the whole session: a
    program compiles once per suite, not once per test (a test that needs a cold one removes the link).
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    if compiled is not None:
        (cache / "jaxintro").mkdir(parents=True, exist_ok=True)
        (cache / "jaxintro" / "xla").symlink_to(compiled, target_is_directory=True)
    monkeypatch.delenv("JAXINTRO_DATA_DIR", raising=False)
    # Unreachable by construction: a test never touches the network by accident.
    monkeypatch.setenv("JAXINTRO_MIRRORS", "http://127.0.0.1:9/")
    # English unless a test asks for Spanish: the machine's locale must not change what tests read.
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")


@pytest.fixture(scope="session", autouse=True)
def isolated_session(tmp_path_factory) -> Iterator[None]:
    """The same isolation for session and module fixtures (trained runs), which start before any test's own.

    Every temporary file goes into pytest's tmp folder (TMPDIR), as Hypothesis's do (pytest_configure): a run
    leaves nothing in the checkout or /tmp.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate_environment(monkeypatch, tmp_path_factory.mktemp("session-cache"), compiled_cache(tmp_path_factory))
        # Every temporary file of the tests, and of the processes they start, goes into pytest's tmp folder,
        # not /tmp (.ci/run checks that /tmp holds nothing new after the suite).
        temp = tmp_path_factory.mktemp("tmp")
        monkeypatch.setenv("TMPDIR", str(temp))
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        # JAX fixes its CPU device count when it starts, once per process: started here, with one device,
        # whichever test comes first (a sweep would otherwise start it with one per core for every later
        # test). Tests of several devices run the CLI in a process of its own.
        import jax

        jax.devices()
        # One compile cache for the session, in this process and in every process it starts (JAX reads these
        # variables when it starts): a program the suite compiled once is read back, not compiled again.
        compiled = compiled_cache(tmp_path_factory)
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(compiled))
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        # matplotlib's font list, built once for the session, not again by every process a test starts (each has
        # an empty user cache of its own, where matplotlib would keep it). A list read while another process
        # still writes it is built again: matplotlib catches that.
        fonts = compiled.parent / "matplotlib-config"
        fonts.mkdir(exist_ok=True)
        monkeypatch.setenv("MPLCONFIGDIR", str(fonts))
        if MUTATION:  # with a size limit JAX locks the folder (filelock) that two mutants' processes share
            jax.config.update("jax_compilation_cache_max_size", 2**33)
            # and the processes a test starts too: an entry written without the limit has no access-time file,
            # which a process with the limit fails to read (a warning at every later write, an error where a
            # test turns warnings into errors)
            monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", str(2**33))
        from jaxintro.runtime import enable_compile_cache

        enable_compile_cache(compiled)
        # The suite compiles many small programs and runs each for a moment: LLVM's optimizations of XLA's code cost
        # it more than they save (tests/test_train.py: 41 s of CPU time with them, 32 s without). JAX's own flag for
        # that case, here and in every process the tests start; the runs whose numbers a user reads keep JAX's
        # defaults (`as_users_compile`).
        monkeypatch.setenv(NO_OPTIMIZATIONS, "1")
        disable_most_optimizations(True)
        yield


NO_OPTIMIZATIONS = "JAX_DISABLE_MOST_OPTIMIZATIONS"  # the variable a process started by a test reads the flag from


def disable_most_optimizations(disabled: bool) -> None:
    """Set JAX's `jax_disable_most_optimizations` for the programs this process compiles from now on."""
    import jax

    if jax.config.read("jax_disable_most_optimizations") == disabled:
        return  # nothing compiled so far was compiled the other way: the caches stay
    jax.config.update("jax_disable_most_optimizations", disabled)
    # JAX's in-memory caches do not key on the flag: a program compiled the other way would be run again. Emptied,
    # every program this process runs next is traced, lowered and compiled (or read back) again.
    jax.clear_caches()


@contextlib.contextmanager
def as_users_compile(here: bool = True) -> Iterator[None]:
    """JAX's default optimizations inside the block, in the processes it starts and (unless `here` is False) in this
    one: for the runs whose numbers a user reads (the lesson's accuracy on MNIST, a document's output, which optimized
    code rounds otherwise) and the trainings on full MNIST, whose 469 steps an epoch repay the optimizing. The suite's
    XLA flag stays (`SUITE_XLA_FLAG`).

    A test whose programs all run in processes it starts passes `here=False`: this process keeps its compiled
    programs, which switching the flag here would throw away (and every later test would lower again).
    """
    import jax

    before = jax.config.read("jax_disable_most_optimizations")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv(NO_OPTIMIZATIONS, raising=False)
        if here:
            disable_most_optimizations(False)
        try:
            yield
        finally:
            disable_most_optimizations(before)


@pytest.fixture
def users_compile() -> Iterator[None]:
    """The test runs with JAX's default optimizations, here and in its processes (`as_users_compile`)."""
    with as_users_compile():
        yield


@pytest.fixture
def users_compile_in_children() -> Iterator[None]:
    """The processes the test starts compile with JAX's default optimizations (`as_users_compile(here=False)`)."""
    with as_users_compile(here=False):
        yield


# The skips CI allows, each with its reason. Under CI (`.ci/run` sets CI=true) any other skip fails the run: a
# test that silently stops running (no MNIST beside the checkout, no PyTorch, no browser) is a lost test.
ALLOWED_SKIPS: dict[str, str] = {}  # none today: every test runs under CI (a GPU-only test would be named here)
_skipped: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:  # in the controlling process too: pytest-xdist passes its workers' reports on
        _skipped.add(report.nodeid)


def _unexpected_skips() -> list[str]:
    return sorted(n for n in _skipped if n.split("[")[0] not in ALLOWED_SKIPS) if os.environ.get("CI") else []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips() and not hasattr(session.config, "workerinput"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _unexpected_skips():
        terminalreporter.write_line("These tests were skipped, which CI does not allow (tests/conftest.py: "
                                    "ALLOWED_SKIPS):", red=True)
        for nodeid in _unexpected_skips():
            terminalreporter.write_line(f"  {nodeid}", red=True)


def compiled_cache(tmp_path_factory) -> Path:
    """The session's one compile-cache folder, shared by the pytest-xdist workers and every process they start:
    a program one of them compiled, the others read back. (An entry read while another process still writes
    it fails to decompress: JAX warns and compiles it again.)

    Under `make mutation` every mutant's session shares one, in mutants/: a program one of them compiled, the
    next reads back (a mutant that changes a program changes its key, so it is compiled afresh).
    """
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common tmp folder
    folder = Path("xla-cache").resolve() if MUTATION else root / "compiled"
    folder.mkdir(exist_ok=True)
    return folder


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> tuple[Path, Any]:
    """A folder and `make(folder)`'s result (JSON), made once per test run by whichever pytest-xdist worker asks
    first; the tests only read them.

    A module or session fixture is made once per worker that runs one of its tests: twice when the random
    order sends them to both. Here the other worker waits for the first and reads what it wrote.
    """
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common tmp folder
    folder, done = root / name, root / f"{name}.json"
    with FileLock(root / f"{name}.lock"):
        if not done.is_file():
            folder.mkdir()
            done.write_text(json.dumps(make(folder)))
        return folder, json.loads(done.read_text())


# Under `make mutation`, the tests that judge each mutated module: mutmut runs, of these, the ones that call the
# mutated function. Without this a mutant of the lesson's step would run every training test of the suite (about
# 200 s when it survives); each module is judged by its own tests, the unit tests of the rules it builds on and
# (for the lesson's step, the trainer and its layouts) the N-device check.
_RULES = ("tests/test_train.py", "tests/test_data.py", "tests/test_runs.py", "tests/test_images.py",
          "tests/test_optim.py", "tests/test_grid.py", "tests/test_reliability.py",
          "tests/test_parallel.py::test_split_steps_on_n_devices_equal_the_one_device_step")
MUTATION_TESTS = {
    **dict.fromkeys(("lesson", "optim", "data", "idx", "runs", "claims", "images", "grid", "record"), _RULES),
    "train": ("tests/test_train.py", "tests/test_parallel.py",
              "tests/test_cli.py::test_persistent_cache_is_reported_for_the_training_program_itself"),
    "layout": ("tests/test_train.py", "tests/test_parallel.py"),
    "parallel": ("tests/test_parallel.py",),
    "members": ("tests/test_members.py",),
    # Its unit tests alone: run with test_checkpoint.py's and test_faults.py's trainings too (each survivor paid
    # about 70 s for them), no mutant they killed was left to them (5 December 2026, every one of the 526 re-run).
    "checkpoint": ("tests/test_checkpoint_units.py",),
    "faults": ("tests/test_faults.py",),
    "evaluate": ("tests/test_evaluate.py", "tests/test_evaluate_units.py"),
    "serve": ("tests/test_serve.py",),
    "serve_model": ("tests/test_serve.py",),
}


def mutated_module() -> str | None:
    """The module of the mutant this process tests (`jaxintro.train.x_fit__mutmut_3` -> "train"), if any."""
    name = os.environ.get("MUTANT_UNDER_TEST", "")
    return name.split(".")[1] if name.startswith("jaxintro.") else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `make mutation`, a mutant runs its module's tests only (`MUTATION_TESTS`), cheapest first and each
    bounded in time (tests/mutation_order.py): mutmut stops at the first one that fails. None left is mutmut's "no
    tests": a survivor, never a kill."""
    module = mutated_module()
    if module is not None:
        judges = MUTATION_TESTS[module]
        items[:] = [item for item in items if item.nodeid.startswith(judges)]
        mutation_order.order_and_bound(items)


# What an in-process `main()` sets in JAX's global config and a later test would inherit (the compile cache
# pointed into an earlier test's tmp folder, say), and the matmul precision a run's `--matmul-precision` sets.
JAX_CACHE_FLAGS = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
                   "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes",
                   "jax_default_matmul_precision")
DEFAULT_JAX_CACHE_FLAGS = dict(zip(JAX_CACHE_FLAGS, (True, None, 1.0, 0, None)))  # JAX's own, for a test that imported it


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch) -> Iterator[Path]:
    """Every test gets its own empty user cache and no inherited data folder or mirrors, and leaves JAX's
    compile-cache settings and the language as it found them."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    isolate_environment(monkeypatch, cache, compiled_cache(tmp_path_factory))
    jax = sys.modules.get("jax")  # never import JAX for a test that does not use it
    before = {name: getattr(jax.config, name) for name in JAX_CACHE_FLAGS} if jax else None
    yield cache
    jax = sys.modules.get("jax")
    if jax is not None:
        from jax.experimental.compilation_cache import compilation_cache

        for name, value in (before or DEFAULT_JAX_CACHE_FLAGS).items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()  # JAX decides once whether to use its cache: forget that decision
    from jaxintro.i18n import set_language

    # English again as the test ends, before the next one's fixtures are made: a test that asked for Spanish leaks it
    # into no later test. Named, not read from the locale: a test's own LANG=es_ES is still set while this runs.
    set_language("en")


@pytest.fixture(autouse=True)
def full_precision_off_the_cpu(request: pytest.FixtureRequest) -> Iterator[None]:
    """A `backend` test on an accelerator compares float32 results as the CPU computes them: its matmuls at full
    float32 precision ("highest"; a TPU's default is one bfloat16 pass, docs/accelerators.md). On a CPU, nothing."""
    jax = sys.modules.get("jax")
    if request.node.get_closest_marker("backend") is None or jax is None or jax.default_backend() == "cpu":
        yield
        return
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture
def cold_compile_cache(isolated_cache: Path) -> Path:
    """This test's own empty compile cache in place of the session's (for a test of what a first run compiles)."""
    folder = isolated_cache / "jaxintro" / "xla"
    folder.unlink()
    folder.mkdir()
    return folder


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The full canonical MNIST shipped beside the project (CI has it too)."""
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"canonical MNIST not found at {MNIST_DIR}")
    return MNIST_DIR


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as an IDX file."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(folder: Path, stem: str, array: np.ndarray, *, gz: bool = True) -> Path:
    """Write `array` as `<stem>[.gz]` in `folder`; return the path."""
    raw = idx_bytes(array)
    path = folder / (stem + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def synthetic_dataset(n_train: int = 512, n_test: int = 128, side: int = 8, seed: int = 0) -> Dataset:
    """A small learnable 10-class problem: each class lights up its own band of pixels."""
    rng = np.random.default_rng(seed)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, n).astype(np.int32)
        x = rng.integers(0, 60, (n, side * side)).astype(np.uint8)
        band = side * side // 10
        for i, label in enumerate(y):
            x[i, label * band:(label + 1) * band] = 200
        return x, y

    x_train, y_train = make(n_train)
    x_test, y_test = make(n_test)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, tuple(str(i) for i in range(10)), (side, side),
                   "synthetic")


@pytest.fixture
def tiny() -> Dataset:
    """The small synthetic dataset."""
    return synthetic_dataset()


class FileServer:
    """A local HTTP server on 127.0.0.1; `routes[path] = (mode, payload)` says what each path does."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[str, bytes]] = {}
        self.hits: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                server.hits.append(self.path)
                mode, payload = server.routes.get(self.path, ("404", b""))
                if mode == "404":
                    self.send_error(404)
                elif mode == "500":
                    self.send_error(500)
                elif mode == "cut":  # promise the whole file, send half, hang up
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.connection.close()
                elif mode == "slow":
                    threading.Event().wait(3.0)
                    self.send_response(200)
                    self.end_headers()
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    """A running local file server, shut down after the test."""
    server = FileServer()
    yield server
    server.close()


__all__ = ["idx_bytes", "write_idx", "synthetic_dataset", "sha256_hex", "FileServer", "once_per_run",
           "as_users_compile"]


@pytest.fixture(scope="session")
def mnist_run(mnist_dir, tmp_path_factory) -> Path:
    """One epoch of the lesson's MLP on MNIST (~96%), trained once per test run for every test that reads real
    digits."""
    from jaxintro.cli import main

    def train(folder: Path) -> None:
        with as_users_compile():
            assert main(["train", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--epochs", "1",
                         "--run-dir", str(folder / "mnist")]) == 0

    return once_per_run(tmp_path_factory, "mnist-run", train)[0] / "mnist"


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> Path:
    """A small offline run (scikit-learn's 8x8 digits, 3 epochs), trained once per test run for every test that
    needs a run."""
    from jaxintro.cli import main

    def train(folder: Path) -> None:
        assert main(["train", "--dataset", "digits", "--epochs", "3", "--run-dir", str(folder / "digits")]) == 0

    return once_per_run(tmp_path_factory, "digits-run", train)[0] / "digits"
