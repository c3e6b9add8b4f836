"""Graceful stops: SIGINT (Ctrl-C) and SIGTERM end training at the next epoch boundary, checkpoint written.

Python runs signal handlers only in the main thread, between bytecodes, so a handler cannot run
while the main thread waits for a compiled epoch (seconds, or minutes on big data). The C-level
handler still writes the signal's number to the wake-up pipe at once; a watcher thread reads it:

- the first SIGINT or SIGTERM asks for a stop at the end of the running epoch (after its checkpoint);
- a second SIGINT quits at once, even in the middle of an epoch (exit 130; the checkpoints already on
  disk are complete, since Orbax renames a step's folder only once it is fully written).

`jaxintro serve` uses the same watcher with `on_stop=server.shutdown`: the first signal stops the
server, a second Ctrl-C quits at once.

In a multi-process run JAX's preemption notifier owns SIGTERM: every process learns of it through
`multihost_utils.reached_preemption_sync_point`, which `fit`'s caller polls at each epoch boundary
so that all processes stop after the same epoch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import TracebackType
from typing import Callable

from jaxintro.i18n import N_, _

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class GracefulStop:
    """A context in which SIGINT/SIGTERM request a stop at the next epoch boundary; a second Ctrl-C quits now."""

    def __init__(self, *, distributed: bool = False, on_stop: Callable[[], object] | None = None,
                 stopping: str = N_("stopping after this epoch's checkpoint")) -> None:
        self.signum: int | None = None  # the first stop signal received
        self.distributed = distributed
        self.on_stop = on_stop  # run in the watcher thread at the first signal (e.g. a server's `shutdown`)
        self.stopping = stopping  # what the first signal does, in English marked with N_: translated when printed
        # With several processes JAX's preemption notifier owns SIGTERM (it replaces any Python handler).
        self._signals = [signal.SIGINT] if distributed else [signal.SIGINT, signal.SIGTERM]
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals belong to the main thread; elsewhere (tests, libraries) nothing is installed
        # First the wake-up pipe, then the handlers. In the other order a signal between the two met the do-nothing
        # handler with no pipe, and was lost. Now a Ctrl-C before our SIGINT handler meets Python's default one,
        # which raises KeyboardInterrupt (at the latest inside `signal.signal`, which runs pending handlers first),
        # and `except` undoes the setup; after it, every signal reaches the pipe.
        try:
            self._pipe = os.pipe()
            os.set_blocking(self._pipe[1], False)
            self._previous_fd = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
            for signum in self._signals:
                # A do-nothing Python handler: the watcher thread does the work, as soon as the signal arrives.
                self._previous[signum] = signal.signal(signum, lambda *_: None)
            watcher = threading.Thread(target=self._watch, args=(self._pipe[0],), name="jaxintro-signals",
                                       daemon=True)
            watcher.start()
            self._thread = watcher
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._pipe is None:
            return
        read_fd, write_fd = self._pipe
        try:
            # The handlers before the pipe, the reverse of `__enter__`: a signal in between meets the handler from
            # before the `with` (Ctrl-C: KeyboardInterrupt), never the do-nothing one with no pipe.
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
        finally:
            try:
                signal.set_wakeup_fd(self._previous_fd)
            finally:  # a Ctrl-C raised at the line above still closes the pipe and ends the watcher
                os.close(write_fd)  # ends the watcher's read with EOF, once it has read what came before
                if self._thread is not None:
                    self._thread.join(timeout=5)
                os.close(read_fd)
                self._pipe, self._thread = None, None

    def _watch(self, read_fd: int) -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        if signum not in self._signals:
            return
        if self.signum is None and self.distributed:
            self.signum = signal.SIGTERM
            print("\nCtrl-C: " + _("asking every process to stop after a common epoch, with its checkpoint (press "
                                   "Ctrl-C again to quit now)"), file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # a preemption notice: all processes learn of it and agree
        elif self.signum is None:
            self.signum = signum
            name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            again = " " + _("(press Ctrl-C again to quit now)") if signum == signal.SIGINT else ""
            print(f"\n{name}: " + _(self.stopping) + again, file=sys.stderr, flush=True)
            if self.on_stop is not None:
                self.on_stop()
        elif signum == signal.SIGINT:
            print(_("Ctrl-C again: quitting now; the checkpoints already written are intact"), file=sys.stderr,
                  flush=True)
            os._exit(EXIT_INTERRUPTED)

    def should_stop(self, epoch: int) -> bool:
        """Whether to stop after `epoch`: a signal here, or (several processes) a preemption notice anywhere.

        With several processes every one must call this after every epoch, with the same epochs:
        JAX's preemption sync point is a collective that names one epoch at which all of them stop.
        """
        if not self.distributed:
            return self.requested
        from jax.experimental import multihost_utils

        return multihost_utils.reached_preemption_sync_point(epoch)

    def exit_code(self) -> int:
        """130 for a stop asked by Ctrl-C in one process, 143 for SIGTERM (and for any stop of several processes)."""
        return EXIT_TERMINATED if self.distributed or self.signum == signal.SIGTERM else EXIT_INTERRUPTED
