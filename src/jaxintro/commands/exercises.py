"""`jaxintro exercises`: write the lesson's code yourself, and have it checked (init, list, check, hint, reset, solution).

A check runs the learner's file in a child process with a time limit, and the checks here
(`jaxintro.exercises.runner`); only a check imports JAX, so init, listing and hints stay light. Exit codes: 0 when the checked
exercise passes (or for init, list, hint, solution), 1 when it fails, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
from pathlib import Path

from jaxintro.errors import ConfigError
from jaxintro.exercises import progress
from jaxintro.exercises.catalog import EXERCISES, Exercise, by_number
from jaxintro.exercises.runner import Verdict, check_in_child
from jaxintro.exercises.texts import hints, key_hint
from jaxintro.i18n import _, resolve_language
from jaxintro.jsonio import json_text

DEFAULT_DIRS = {"es": "ejercicios", "en": "exercises"}
DEFAULT_TIMEOUT = 60.0  # seconds per exercise: JAX's start-up and a few compiles, with room on a slow machine
SHOWN_LINES, SHOWN_CHARS = 20, 1500  # of what the learner's file printed, shown under a failed check


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action (default: list)."""
    lang = resolve_language(getattr(args, "lang", None))
    action = getattr(args, "action", None) or "list"
    if action == "init":
        return init(Path(args.folder or args.dir or DEFAULT_DIRS.get(lang, "exercises")), lang)
    folder = find_folder(getattr(args, "dir", None), lang)
    if action == "list":
        return show_list(folder, lang, as_json=getattr(args, "json", False), timeout=DEFAULT_TIMEOUT)
    if action == "check":
        if args.watch:
            if args.json:
                raise ConfigError(_("--watch and --json do not go together: --watch prints a verdict per save"))
            return watch(folder, lang, args.number, timeout=args.timeout)
        return check(folder, lang, args.number, as_json=args.json, timeout=args.timeout)
    if action == "hint":  # without N, as `check`: the first exercise that does not pass
        exercise = (by_number(args.number) if args.number else
                    next_exercise(folder, load_progress(folder, lang, timeout=DEFAULT_TIMEOUT)))
        if exercise is None:
            print(_("Every exercise passes. Well done!"))
            return 0
        return hint(folder, lang, exercise, timeout=DEFAULT_TIMEOUT)
    if action == "reset":
        return reset(folder, lang, by_number(args.number))
    return solution(folder, lang, by_number(args.number), force=args.force, timeout=DEFAULT_TIMEOUT)


def find_folder(flag: str | None, lang: str) -> Path:
    """`--dir`, else the language's default folder, else the other language's if only that one exists."""
    if flag:
        folder = Path(flag)
    else:
        candidates = [Path(DEFAULT_DIRS.get(lang, "exercises"))] + [Path(d) for d in DEFAULT_DIRS.values()]
        folder = (next((c for c in candidates if (c / EXERCISES[0].filename).exists()), None)
                  or enclosing_folder() or candidates[0])
    if not folder.is_dir():
        raise ConfigError(_("no exercises folder at {folder}: create it with `jaxintro exercises init`").format(
            folder=folder))
    return folder


def enclosing_folder() -> Path | None:
    """The exercises folder the working directory is in, or below (as rustlings finds its own): the nearest
    folder up from here with a progress file beside an exercise file."""
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / progress.PROGRESS_FILE).is_file() and any((folder / e.filename).exists() for e in EXERCISES):
            return Path(os.path.relpath(folder))  # "." or "..": the messages stay short
    return None


def init(folder: Path, lang: str) -> int:
    """Write the starter files that can be written now into `folder`; a file that exists is kept, never overwritten.

    A file whose given code holds the answer of an exercise not yet passed (`Exercise.builds_on`) appears later,
    when that exercise passes (`write_open_starters`)."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = progress.load(folder)
    if entries is None:  # damaged: left for the next check to rebuild; until then no file appears by a pass
        entries = {}
    elif not (folder / progress.PROGRESS_FILE).exists():
        progress.save(folder, {})  # the folder is known from inside it by this file
    kept = [folder / e.filename for e in EXERCISES if (folder / e.filename).exists()]
    new = write_open_starters(folder, lang, entries)
    print(_("{count} exercise files in {folder}/ (new: {new}).").format(
        count=len(kept) + len(new), folder=folder, new=len(new)))
    if kept:
        print(_("Kept as they were: {files}. For a fresh copy of one: jaxintro exercises reset N (yours is kept "
                "as a backup).").format(files=", ".join(p.name for p in kept)))
    locked = [e for e in EXERCISES if not (folder / e.filename).exists()]
    if locked:
        print(_("Still to come, each once the exercises it builds on pass (its given code holds their answers): "
                "{files}.").format(files=", ".join(_("{file} (after {after})").format(
                    file=e.filename, after=", ".join(map(str, e.builds_on))) for e in locked)))
    upcoming = next_exercise(folder, entries)
    if upcoming is None:
        print(_("Every exercise passes. Well done!"))
    else:
        print(_("Next: {file}, then jaxintro exercises check {n}").format(file=folder / upcoming.filename,
                                                                         n=upcoming.number))
    return 0


def write_open_starters(folder: Path, lang: str, entries: dict[str, progress.Entry]) -> list[Path]:
    """Write the starter of every exercise that has no file yet and whose given code may be shown (each exercise it
    builds on has passed once); the files written."""
    written = []
    for exercise in EXERCISES:
        path = folder / exercise.filename
        if not path.exists() and progress.is_open(exercise, entries):
            path.write_text(exercise.starter(lang), encoding="utf-8")
            written.append(path)
    return written


def refuse_locked(folder: Path, exercise: Exercise, entries: dict[str, progress.Entry]) -> None:
    """A `ConfigError` when `exercise`'s file has not appeared yet: it holds answers not yet passed."""
    if not (folder / exercise.filename).exists() and (waiting := progress.waiting_for(exercise, entries)):
        raise ConfigError(_("{file} builds on exercise {after}, whose answer its given code holds: it appears once "
                            "that passes (jaxintro exercises check {first})").format(
            file=exercise.filename, after=", ".join(map(str, waiting)), first=waiting[0]))


def load_progress(folder: Path, lang: str, *, timeout: float) -> dict[str, progress.Entry]:
    """The progress in `folder`; a damaged file is rebuilt by checking every started exercise again."""
    entries = progress.load(folder)
    if entries is not None:
        return entries
    print(_("The progress file {file} was unreadable: checking every started exercise again to rebuild it.").format(
        file=folder / progress.PROGRESS_FILE), file=sys.stderr)
    entries = {}
    items = [(e, folder / e.filename) for e in EXERCISES
             if (folder / e.filename).exists() and not progress.is_starter(e, folder / e.filename)]
    if items:
        for verdict in check_in_child(items, lang, timeout=timeout):
            exercise = EXERCISES[verdict.number - 1]
            progress.record(entries, exercise, folder / exercise.filename, verdict.passed, verdict.key)
    progress.save(folder, entries)
    return entries


def next_exercise(folder: Path, entries: dict[str, progress.Entry]) -> Exercise | None:
    """The first exercise that does not pass as the file stands now."""
    return next((e for e in EXERCISES if progress.state(e, folder, entries) != "passed"), None)


def show_list(folder: Path, lang: str, *, as_json: bool, timeout: float) -> int:
    """Every exercise with its state, and what to do next."""
    entries = load_progress(folder, lang, timeout=timeout)
    states = [(e, progress.state(e, folder, entries)) for e in EXERCISES]
    upcoming = next_exercise(folder, entries)
    if as_json:
        print(json_text({"folder": str(folder), "next": upcoming.number if upcoming else None, "exercises": [
            {"number": e.number, "file": e.filename, "state": s, "section": _(e.section)} for e, s in states]}))
        return 0
    passed = sum(s == "passed" for _e, s in states)
    print(_("Exercises in {folder}/: {passed} of {total} pass").format(folder=folder, passed=passed,
                                                                     total=len(EXERCISES)))
    shown = [_(progress.STATES[s]).format(numbers=", ".join(map(str, progress.waiting_for(e, entries))))
             for e, s in states]
    width = max(map(len, shown)) + 2  # the widest state in this language, so that no section runs into it
    for (exercise, _state), said in zip(states, shown):
        section = _(exercise.section)
        print(f"  {exercise.number:>2}  {exercise.filename:<26}{said:<{width}}{section}")
    if upcoming is None:
        print(_("Every exercise passes. Well done!"))
    else:
        print(_("Next: jaxintro exercises check {n}").format(n=upcoming.number))
    return 0


def check(folder: Path, lang: str, number: int | None, *, as_json: bool, timeout: float) -> int:
    """Check exercise `number` (default: the first that does not pass) in a child process; print the verdict."""
    entries = load_progress(folder, lang, timeout=timeout)
    exercise = by_number(number) if number else next_exercise(folder, entries)
    if exercise is None:
        print(_("Every exercise passes. Well done!"))
        return 0
    verdict = check_one(folder, lang, exercise, entries, timeout=timeout)
    if as_json:
        print(json_text({**dataclasses.asdict(verdict), "file": str(folder / exercise.filename),
                          "section": _(exercise.section)}))
    else:
        print_verdict(folder, exercise, verdict, entries)
    return 0 if verdict.passed else 1


def check_one(folder: Path, lang: str, exercise: Exercise, entries: dict[str, progress.Entry], *,
              timeout: float) -> "Verdict":
    """Run the check of `exercise` and record it in the progress file."""
    path = folder / exercise.filename
    refuse_locked(folder, exercise, entries)
    if not path.exists():
        raise ConfigError(_("{file} does not exist: `jaxintro exercises init {folder}` writes it").format(
            file=path, folder=folder))
    if progress.is_starter(exercise, path):  # as init wrote it: it raises NotImplementedError, no need to run it
        verdict = Verdict.failed(exercise, "not_implemented", _(
            "{name} still raises NotImplementedError: write it where the TODO is").format(name=exercise.functions[0]))
    else:
        verdict = check_in_child([(exercise, path)], lang, timeout=timeout)[0]
    progress.record(entries, exercise, path, verdict.passed, verdict.key)
    progress.save(folder, entries)
    if verdict.passed:
        verdict.unlocked = [p.name for p in write_open_starters(folder, lang, entries)]
    return verdict


def print_verdict(folder: Path, exercise: Exercise, verdict: "Verdict", entries: dict[str, progress.Entry]) -> None:
    """The verdict in a few lines: what broke and where to look, or what comes next (and what the file did wrong
    that no check fails)."""
    for note in verdict.notes:
        print(_("Note: {note}").format(note=note), flush=True)
    if verdict.printed > 2000:
        first = (verdict.output.strip().splitlines() or [""])[0][:80]
        print(_("Note: your file printed {count} characters while checked (the first line: {line})").format(
            count=verdict.printed, line=first), flush=True)
    if verdict.passed:
        print(_("PASSED {n} {file}: every check holds.").format(n=exercise.number, file=exercise.filename), flush=True)
        for name in verdict.unlocked:
            print("  " + _("New: {file}, which builds on this one").format(file=folder / name), flush=True)
        upcoming = next_exercise(folder, entries)
        if upcoming is not None:
            print("  " + _("Next: {file}, then jaxintro exercises check {n}").format(
                file=folder / upcoming.filename, n=upcoming.number), flush=True)
        return
    print(_("FAILED {n} {file} [{key}]: {message}").format(n=exercise.number, file=exercise.filename,
                                                          key=verdict.key, message=verdict.message), flush=True)
    print_output(verdict)
    print("  " + _("Lesson: {section}. A hint: jaxintro exercises hint {n}").format(
        section=_(exercise.section), n=exercise.number), flush=True)


def print_output(verdict: "Verdict") -> None:
    """What the learner's file printed while checked (its first lines), and how much was left out."""
    lines = verdict.output[:SHOWN_CHARS].rstrip("\n").splitlines()[:SHOWN_LINES]
    if not lines:
        return
    print("  " + _("Your file printed:"), flush=True)
    for line in lines:
        print("  | " + line[:200], flush=True)
    shown = sum(len(line) + 1 for line in lines)
    if verdict.printed > shown:
        print("  | " + _("... {count} more characters not shown").format(count=verdict.printed - shown), flush=True)


def hint(folder: Path, lang: str, exercise: Exercise, *, timeout: float) -> int:
    """Show one more hint than last time (all of them shown so far, in order), after the one for the last failure."""
    entries = load_progress(folder, lang, timeout=timeout)
    texts = hints(exercise.slug, lang)
    entry = entries.setdefault(exercise.slug, progress.Entry())
    for_key = key_hint(exercise.slug, entry.key, lang) if entry.key else None
    if for_key and progress.state(exercise, folder, entries) == "failing":  # the file is the one that failed
        print(_("For your last failure [{key}]: {hint}").format(key=entry.key, hint=for_key))
    entry.hints = min(entry.hints + 1, len(texts))
    progress.save(folder, entries)
    for i, text in enumerate(texts[: entry.hints], start=1):
        print(f"{i}. {text}")
    if entry.hints < len(texts):
        print(_("(hint {shown} of {total}: run it again for the next)").format(shown=entry.hints, total=len(texts)))
    else:
        print(_("That was the last hint. Our solution: jaxintro exercises solution {n} (once it passes, or with "
                "--force)").format(n=exercise.number))
    return 0


def reset(folder: Path, lang: str, exercise: Exercise) -> int:
    """Write `exercise`'s starter again; the learner's file is kept beside it as a backup (never deleted)."""
    path = folder / exercise.filename
    refuse_locked(folder, exercise, progress.load(folder) or {})
    if path.exists() and not progress.is_starter(exercise, path):
        backup = next(b for n in itertools.count(1) if not (b := path.with_name(f"{path.stem}.backup-{n}.py")).exists())
        path.rename(backup)  # not an exercise's name: list, check and --watch pass it over
        print(_("Your file is kept as {backup}.").format(backup=backup))
    path.write_text(exercise.starter(lang), encoding="utf-8")
    entries = progress.load(folder)
    if entries is not None:  # a damaged file is left for the next command to rebuild, not overwritten
        entry = entries.get(exercise.slug)
        if entry is not None:  # the hints seen and a pass once (the solution) are kept
            entry.passed, entry.key, entry.digest = False, None, ""
        progress.save(folder, entries)
    print(_("{file} is a fresh starter again. Check it with: jaxintro exercises check {n}").format(
        file=path, n=exercise.number))
    return 0


def solution(folder: Path, lang: str, exercise: Exercise, *, force: bool, timeout: float) -> int:
    """Print our reference once the exercise has passed; with --force, after asking."""
    entries = load_progress(folder, lang, timeout=timeout)
    entry = entries.get(exercise.slug)
    if not (entry and entry.passed_once):
        if not force:
            raise ConfigError(_("exercise {n} does not pass yet: the solution is shown once it passes (or with "
                                "--force, which asks first)").format(n=exercise.number))
        try:
            answer = input(_("Exercise {n} does not pass yet. Show our solution anyway? [y/N] ").format(
                n=exercise.number))
        except EOFError:
            answer = ""
        if answer.strip().lower() not in {"y", "yes", _("y"), _("yes")}:
            print(_("Not shown."))
            return 1
    print(exercise.reference(lang), end="")
    return 0


def watch(folder: Path, lang: str, number: int | None, *, timeout: float) -> int:
    """Check, then check again each time an exercise file is saved (the one saved); Ctrl-C stops."""
    from watchfiles import watch as watch_changes

    entries = load_progress(folder, lang, timeout=timeout)
    exercise = by_number(number) if number else next_exercise(folder, entries)
    try:
        if exercise is not None:
            print_verdict(folder, exercise, check_one(folder, lang, exercise, entries, timeout=timeout), entries)
        names = {e.filename: e for e in EXERCISES}
        announced = False
        # With yield_on_timeout the first (perhaps empty) batch comes once the watcher is running: only then
        # is "Watching" true, and a file saved after it is seen.
        for changes in watch_changes(folder, debounce=400, step=100, rust_timeout=500, yield_on_timeout=True):
            if not announced:
                print(_("Watching {folder}/ for saved files (Ctrl-C stops).").format(folder=folder), flush=True)
                announced = True
            saved = sorted({names[Path(p).name] for _change, p in changes if Path(p).name in names},
                           key=lambda e: e.number)
            for exercise in saved:  # a starter a pass just wrote (or saved unchanged) has nothing to check yet
                path = folder / exercise.filename
                if path.exists() and not progress.is_starter(exercise, path):
                    print_verdict(folder, exercise, check_one(folder, lang, exercise, entries, timeout=timeout),
                                  entries)
    except KeyboardInterrupt:
        print(_("Stopped watching."), flush=True)
    return 0
