"""The project's own errors: each names the problem and the fix."""


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
