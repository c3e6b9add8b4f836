"""Run folders: claimed atomically, written atomically, so two runs never share one and nothing is half-written."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from jaxintro.errors import ConfigError

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync, then rename over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Atomically write `obj` as indented JSON."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    """Read a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def write_metrics(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite `metrics.jsonl` with one JSON object per epoch (atomic, so a resume never sees half a line)."""
    write_atomic(run_dir / METRICS_FILE, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def claim_run_dir(run_dir: str | os.PathLike | None, root: Path = Path("runs")) -> Path:
    """Create and claim a fresh run folder; `None` means `runs/<timestamp>`.

    The claim is `mkdir` of a folder that must not exist yet (or an empty one given by the
    user, claimed through an exclusively created marker), so two runs started at once can
    never write into the same folder.
    """
    if run_dir is None:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the runs folder {root}: {exc.strerror}; pass --run-dir DIR") from None
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        for attempt in range(1000):
            path = root / (stamp if attempt == 0 else f"{stamp}-{attempt}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
        raise ConfigError(f"could not claim a new run folder under {root}; pass --run-dir DIR")
    path = Path(run_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".claimed"
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
    except FileExistsError:
        raise ConfigError(
            f"--run-dir {path} already holds a run; choose another folder, or continue it with --resume {path}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"--run-dir {path} is not writable ({exc.strerror}); choose another folder") from None
    if (path / CONFIG_FILE).exists():
        probe.unlink()
        raise ConfigError(
            f"--run-dir {path} already holds a run; choose another folder, or continue it with --resume {path}"
        )
    return path
