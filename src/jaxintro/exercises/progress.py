"""The learner's progress: one small JSON file in the exercises folder, and each exercise's state.

The file only remembers what checking found (and how many hints were shown); the states come from
it and from the files themselves, so a lost or damaged file is rebuilt by checking again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path

from jaxintro.exercises.catalog import EXERCISES, Exercise
from jaxintro.exercises.texts import TEXT_LANGUAGES
from jaxintro.i18n import N_

PROGRESS_FILE = ".progress.json"
VERSION = 1
# The states, in the words `list` shows (translated there).
STATES = {
    "locked": N_("opens after {numbers}"),  # the exercises it waits for
    "missing": N_("no file"),
    "not_started": N_("not started"),
    "failing": N_("failing"),
    "unchecked": N_("not checked yet"),
    "passed": N_("passed"),
    "changed": N_("edited since it passed"),
}


@dataclasses.dataclass
class Entry:
    """What is known of one exercise: the last check's outcome and the file it was run on."""

    passed: bool = False  # the last check passed
    digest: str = ""  # sha256 of the file that check ran on
    key: str | None = None  # the last failure's key
    passed_once: bool = False  # some version of the file passed: its solution may be shown
    hints: int = 0  # hints shown so far


def digest(path: Path) -> str:
    """The sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(folder: Path) -> dict[str, Entry] | None:
    """The progress in `folder` (empty when there is no file yet); None when the file is damaged."""
    path = folder / PROGRESS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != VERSION:
            return None
        slugs = {exercise.slug for exercise in EXERCISES}
        return {slug: Entry(**fields) for slug, fields in data["exercises"].items() if slug in slugs}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def save(folder: Path, entries: dict[str, Entry]) -> None:
    """Write the progress atomically (a crash leaves the old file or the new one, never half of one)."""
    path = folder / PROGRESS_FILE
    data = {"version": VERSION, "exercises": {slug: dataclasses.asdict(e) for slug, e in sorted(entries.items())}}
    # A temporary name of its own (whatever lies at `.progress.tmp`, a folder even, is not ours to write or remove).
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".progress-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_starter(exercise: Exercise, path: Path) -> bool:
    """True when `path` still holds the starter text `init` wrote (in any language)."""
    text = path.read_text(encoding="utf-8")
    return any(text == exercise.starter(lang) for lang in TEXT_LANGUAGES)


def waiting_for(exercise: Exercise, entries: dict[str, Entry]) -> list[int]:
    """The exercises `exercise` builds on (its file holds their answers) that have not passed yet."""
    return [k for k in exercise.builds_on if not entries.get(EXERCISES[k - 1].slug, Entry()).passed_once]


def is_open(exercise: Exercise, entries: dict[str, Entry]) -> bool:
    """Whether `exercise`'s file may be written: every exercise it builds on has passed once."""
    return not waiting_for(exercise, entries)


def state(exercise: Exercise, folder: Path, entries: dict[str, Entry]) -> str:
    """One of `STATES`: what the file and the last check say about `exercise`."""
    path = folder / exercise.filename
    if not path.exists():
        return "missing" if is_open(exercise, entries) else "locked"
    if is_starter(exercise, path):
        return "not_started"
    entry = entries.get(exercise.slug)
    if entry is None or not entry.digest:
        return "unchecked"
    if entry.digest != digest(path):
        return "changed" if entry.passed_once else "unchecked"
    return "passed" if entry.passed else "failing"


def record(entries: dict[str, Entry], exercise: Exercise, path: Path, passed: bool, key: str | None) -> None:
    """Remember a check's outcome on the file as it is now."""
    entry = entries.setdefault(exercise.slug, Entry())
    entry.passed, entry.key, entry.digest = passed, key, digest(path)
    entry.passed_once = entry.passed_once or passed
