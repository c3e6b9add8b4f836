"""The project's own errors: each names the problem and the fix."""

from __future__ import annotations

import re

from jaxintro.i18n import _


def error_line(command: str, error: object) -> str:
    """How a command's error reads on stderr: `jaxintro COMMAND: error: ...`."""
    return _("jaxintro {command}: error: {error}").format(command=command, error=error)


class JaxintroError(Exception):
    """Base class: a user-facing error that the CLI prints as one line (exit code 2)."""


class ConfigError(JaxintroError):
    """A flag or config value is out of range or unknown."""


class DataError(JaxintroError):
    """A data file is missing, unreadable, corrupt or fails its checksum."""


class DataNotFoundError(DataError):
    """A dataset is neither on disk nor downloadable."""


class CheckpointError(JaxintroError):
    """A checkpoint is missing, damaged or belongs to another model."""


class TrainingDivergedError(JaxintroError):
    """The loss became NaN or Inf."""


# How JAX words a device it could not open, e.g. "Unable to initialize backend 'tpu': ABORTED: Internal error when
# accessing libtpu multi-process lockfile. Run ..." when another process holds the TPU chip.
BACKEND_FAILED = re.compile(r"Unable to initialize backend '(\w+)': ([^\n]*?)(?:\.(?=\s|$)|\n|$)")
HELD = ("lockfile", "in use", "already being used")  # the words of a chip another process holds


def device_unavailable(exc: RuntimeError) -> str | None:
    """The one line for JAX's failure to open a device (a TPU held by another process, say); None for any other error."""
    found = BACKEND_FAILED.match(str(exc))
    if found is None:
        return None
    backend, reason = found.group(1).upper(), found.group(2)
    if any(word in reason for word in HELD):
        return _("the {backend} is held by another process ({reason}); one process at a time may hold it: wait for "
                 "that process to end, or run on the CPU with JAX_PLATFORMS=cpu").format(backend=backend, reason=reason)
    return _("JAX could not open the {backend} ({reason}); check that its driver is ready and no other process holds it, "
             "or run on the CPU with JAX_PLATFORMS=cpu").format(backend=backend, reason=reason)
