"""JAX runtime set-up done once per process: the persistent compilation cache and its hit counter."""

from __future__ import annotations

import contextlib
import importlib
import threading
from pathlib import Path

import jax

from jaxintro.data import default_cache_dir
from jaxintro.errors import ConfigError
from jaxintro.i18n import _

_lock = threading.Lock()
_events = {"hits": 0, "misses": 0}
_listening = False


def _on_event(event: str, **_: object) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _events["hits"] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        _events["misses"] += 1


def configure_jax(*, devices: int = 1, compile_cache: bool = True, cpu_devices: int = 1,
                  matmul_precision: str = "default", cache_dir: Path | None = None) -> Path | None:
    """Set JAX up before first use: the CPU device count, float32 matmuls' precision (`--matmul-precision`) and the
    persistent compile cache (its folder, `cache_dir` or the user cache's; or None).

    `devices` must exist (`--devices`); `cpu_devices` are created if JAX has not started yet, else the
    devices it has are used (members spread over what there is).
    """
    if max(devices, cpu_devices) > 1:
        # Must happen before the backend starts; it only affects the CPU backend.
        try:
            jax.config.update("jax_num_cpu_devices", max(devices, cpu_devices))
        except RuntimeError:  # JAX already started in this process (jaxintro used as a library)
            if len(jax.devices()) < devices:
                raise ConfigError(_("--devices {wanted}: JAX already started with {seen} device(s) in this process; "
                                    "run jaxintro in a fresh process").format(wanted=devices, seen=len(jax.devices()))
                                  ) from None
    # Set either way: a process that runs several commands (tests, notebooks) must not keep an earlier choice.
    set_matmul_precision(matmul_precision)
    # JAX decides once per process whether (and where) its cache is used; forget that decision first.
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", compile_cache)
    return enable_compile_cache(cache_dir) if compile_cache else None


def set_matmul_precision(precision: str) -> None:
    """Float32 matmuls from now on: "default" (the backend's: one bfloat16 pass on a TPU), "high" or "highest"
    (full float32). Read when a program is traced, so set before anything compiles (docs/accelerators.md)."""
    jax.config.update("jax_default_matmul_precision", None if precision == "default" else precision)


def enable_compile_cache(directory: Path | None = None) -> Path:
    """Turn on JAX's persistent compilation cache (default: the user cache's `xla/`); return its folder."""
    global _listening
    directory = directory or default_cache_dir() / "xla"
    directory.mkdir(parents=True, exist_ok=True)
    # JAX writes the folder's path into every entry's key (it names XLA's GPU caches inside it):
    # the same folder reached through a symbolic link would miss every entry written under its real path.
    directory = directory.resolve()
    jax.config.update("jax_compilation_cache_dir", str(directory))
    # Cache every program: the epoch compiles in well under JAX's default 1 s threshold.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    with _lock:
        if not _listening:
            jax.monitoring.register_event_listener(_on_event)
            _listening = True
    return directory


def import_in_background(module: str) -> None:
    """Import `module` in a thread, so that its import overlaps work that waits on something else (opening a chip,
    reading the data, compiling); an `import` of it in the main thread then waits only for what is left.

    An import in the main thread waits for this one (Python locks a module while it loads). Not a daemon: a command
    that ends early (a model refused for its memory, Ctrl-C) waits for the import to finish, since a daemon thread
    stopped inside a C extension's import as the interpreter shuts down can abort the process ("terminate called
    ..."). A failure is left to that later import, which reports it in the command's own words, not a thread's
    traceback in the middle of the epochs."""
    threading.Thread(target=_import_quietly, args=(module,), name=f"import-{module}").start()


def _import_quietly(module: str) -> None:
    with contextlib.suppress(Exception):
        importlib.import_module(module)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB, from /proc's VmHWM where it exists.

    `getrusage` would also count the parent's memory at fork time (Linux records the
    pre-exec image's high-water mark), which inflates a child started by a large parent.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def release_free_memory() -> None:
    """Return freed heap pages to the OS (glibc's malloc_trim) where the model lives in host memory, on a CPU
    backend; a no-op elsewhere.

    XLA's compiler frees ~90 MB after compiling the epoch, but glibc keeps it mapped; without this
    the process's resident memory would carry the compiler's garbage for the whole run. On an accelerator
    the host's heap is mostly the runtime's own (14 GB resident on a TPU v5e host): a trim walks it for 30
    to 600 ms a call (1.1 s of a 10-epoch `train` there) to return the compiler's garbage and, per save, a
    state's size (2.8 MB for the lesson's model), which that heap does not notice.
    """
    if jax.default_backend() != "cpu":
        return
    import ctypes

    try:
        # The symbols already loaded into this process, libc's among them: no search for the library file
        # (ctypes.util.find_library starts `ldconfig -p` on every call, and this runs after every save).
        process = ctypes.CDLL(None)
        if hasattr(process, "malloc_trim"):
            process.malloc_trim(0)
    except OSError:
        pass


def compile_cache_counts() -> dict[str, int]:
    """Persistent-cache hits and misses seen so far in this process."""
    return dict(_events)
