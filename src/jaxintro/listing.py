"""What `jaxintro runs` shows of the run folders: each one described (its kind, status and headline number),
listed, and which unfinished ones may be removed; and which run is the learner's newest (`serve`).

Every file is read by `runs.py`'s read rule, and a removal deletes by its delete rule: only what jaxintro wrote.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import socket
import sys
from pathlib import Path
from typing import Any

from jaxintro.claims import claim_is_live, locked, read_claim
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.grid import diverged_in, headline_accuracy, kind_of
from jaxintro.i18n import N_, _, ngettext, printable
from jaxintro.runs import (CLAIM_FILE, CONFIG_FILE, RESOLVED_DATASET, RESULT_FILE, committed_epochs, foreign_entries,
                           has_checkpoint, is_finished, is_own_config, read_config, read_metrics, read_result,
                           remove_own_files)


def describe_run(run_dir: Path) -> dict[str, Any] | None:
    """What `jaxintro runs` shows of one folder: dataset, model, epochs, accuracy and status; None if not a run.

    A folder whose files are not what jaxintro writes is "unreadable", with the reason; it never stops the list.
    """
    if not (os.path.lexists(run_dir / CONFIG_FILE) or os.path.lexists(run_dir / CLAIM_FILE)):
        return None
    try:
        config = read_config(run_dir)
        rows = read_metrics(run_dir)
        result = read_result(run_dir)
        kind = run_kind(config, rows[-1] if rows else None)
        committed = committed_epochs(run_dir)
    except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
        return {"run_dir": str(run_dir), "dataset": "?", "model": "?", "epochs": 0, "planned_epochs": 0,
                "kind": "?", "member_count": 0, "diverged": 0, "test_accuracy": None, "status": "unreadable",
                "reason": str(exc), "result": None}
    # The epochs done are those of the newest committed checkpoint, where a resume goes on from (unless it is
    # damaged: then the one before): a process that died between committing it and writing its row (a lost
    # peer's survivor exits at once) left metrics.jsonl, and the accuracy shown, an epoch behind.
    if committed:
        done = committed[-1]
    else:
        done = rows[-1]["epoch"] if rows else 0
    planned = config.get("epochs", 0)
    if is_finished(result, planned):
        status = "finished"
    elif claim_is_live(run_dir) and result is None:
        status = "running"
    elif committed:
        status = f"stopped after epoch {done}: jaxintro train --resume {run_dir}"
    else:
        status = "empty (no checkpoint)"
    return {"run_dir": str(run_dir), "dataset": config.get(RESOLVED_DATASET, config.get("dataset", "?")),
            "model": config.get("model", "?"), "epochs": done, "planned_epochs": planned,
            **kind, "status": status, "result": result}


# The fields of `config.json` that say which members a run trained (its seeds and a sweep's grid).
MEMBER_FIELDS = ("seed", "seeds", "lr", "lr_grid", "weight_decay", "weight_decay_grid", "optimizer")


def run_kind(config: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """What kind of run a folder holds (one model, seeds, a sweep), how many diverged, and its headline accuracy."""
    fields = {k: v for k, v in config.items() if k != RESOLVED_DATASET}
    try:
        train_config = TrainConfig.from_json(fields)
    except (ConfigError, TypeError, ValueError):
        # Another version's config (a model it no longer has, a field it did not know): a listing needs only
        # which members it trained, read from those fields alone (and values no version wrote are unreadable).
        try:
            train_config = TrainConfig.from_json({k: v for k, v in fields.items() if k in MEMBER_FIELDS})
        except (ConfigError, TypeError, ValueError) as exc:
            raise ValueError(_("{name}: {error}").format(name=CONFIG_FILE, error=exc)) from None
    return {"kind": kind_of(train_config), "member_count": train_config.members, "diverged": len(diverged_in(row or {})),
            "test_accuracy": headline_accuracy(train_config, row) if row else None}


def kind_text(info: dict[str, Any]) -> str:
    """`1 model`, `8 seeds`, `sweep: 6 models` (and how many diverged), as `jaxintro runs` prints it."""
    count = info.get("member_count", 1)
    if info.get("kind") == "sweep":
        text = ngettext("sweep: {n} model", "sweep: {n} models", count).format(n=count)
    elif info.get("kind") == "seeds":
        text = ngettext("{n} seed", "{n} seeds", count).format(n=count)
    else:
        text = _("1 model")
    if info.get("diverged"):
        text += ", " + ngettext("{n} diverged", "{n} diverged", info["diverged"]).format(n=info["diverged"])
    return text


# `describe_run`'s statuses stay English (code and `--json` compare them); these are what a learner reads.
STATUS_TEXT = {
    "finished": N_("finished"),
    "running": N_("running"),
    "unreadable": N_("unreadable"),
    "empty (no checkpoint)": N_("empty (no checkpoint)"),
}


def status_text(info: dict[str, Any]) -> str:
    """A run's status (from `describe_run`) as `jaxintro runs` prints it, in the chosen language."""
    if info["status"] == "unreadable" and info.get("reason"):
        return _("unreadable: {reason}").format(reason=info["reason"])
    if info["status"] in STATUS_TEXT:
        return _(STATUS_TEXT[info["status"]])
    return _("stopped after epoch {epoch}: jaxintro train --resume {run_dir}").format(
        epoch=info["epochs"], run_dir=info["run_dir"])


def list_runs(root: Path = Path("runs")) -> list[dict[str, Any]]:
    """Every run folder directly under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = (describe_run(child) for child in sorted(root.iterdir()) if child.is_dir())
    return [info for info in found if info is not None]


def keep_reason(info: dict[str, Any]) -> str | None:
    """Why `runs --remove-unfinished` keeps a folder it would otherwise remove (None: it may go)."""
    run_dir = Path(info["run_dir"])
    if info["status"] in ("finished", "running"):
        return _(STATUS_TEXT[info["status"]])
    if run_dir.is_symlink():
        return _("a symbolic link: remove the link itself if you mean to")
    if info["status"] == "unreadable":
        return _("its files cannot be read: look at it first")
    foreign = foreign_entries(run_dir)
    if foreign or not is_own_config(read_config(run_dir)):
        return _("not a jaxintro run: it holds {names}, which jaxintro does not write").format(
            names=", ".join(printable(name) for name in foreign[:5]) or CONFIG_FILE)
    if has_checkpoint(run_dir):
        return _("it holds a checkpoint: continue it with jaxintro train --resume {run_dir}").format(
            run_dir=printable(run_dir))
    if claim_is_live(run_dir):
        return _("a live process claims it")
    return None


def remove_run_dir(run_dir: Path) -> bool:
    """Delete an unfinished run folder unless, looked at again under its claim's lock, it must be kept.

    Only jaxintro's own files and step folders are removed, then the folder itself if that left it empty.
    """
    try:
        with locked(run_dir):  # a `claim_run_dir` of this folder waits for us, and we for it
            info = describe_run(run_dir)
            if info is None or keep_reason(info) is not None:
                return False
            remove_own_files(run_dir)
            run_dir.rmdir()  # refused if anything else appeared meanwhile: kept, and said why
    except (OSError, ValueError) as exc:  # gone already (another removal), or not ours to delete: kept, and said why
        print(_("Kept {run_dir}: {reason}").format(run_dir=printable(run_dir),
                                                    reason=printable(getattr(exc, "strerror", None) or exc)),
              file=sys.stderr)
        return False
    return True


def newest_finished_run(root: Path = Path("runs"), now: dt.datetime | None = None) -> Path | None:
    """The learner's most recently finished run under `root`, or None.

    By the time the run recorded in its result (`written_at`), not its file's time, which a zip carries
    over from another machine; a run claimed on this machine comes before another's, and a time still to
    come (another clock, or a crafted file) never makes a run the newest.
    """
    now = now or dt.datetime.now(dt.timezone.utc)

    def recency(info: dict[str, Any]) -> tuple[bool, float]:
        run_dir = Path(info["run_dir"])
        return claimed_here(run_dir), finished_at(info, now)

    finished = [info for info in list_runs(root) if info["status"] == "finished"]
    return Path(max(finished, key=recency)["run_dir"]) if finished else None


def finished_at(info: dict[str, Any], now: dt.datetime) -> float:
    """When a listed run finished, as a timestamp: the time its result records, else its file's; -inf for a time
    still to come or none that can be read (a year past 9999, a time a clock cannot hold)."""
    run_dir = Path(info["run_dir"])
    try:
        written = dt.datetime.fromisoformat((info["result"] or {})["written_at"])
    except (KeyError, TypeError, ValueError):  # an older version's result: its file's time
        try:
            written = dt.datetime.fromtimestamp((run_dir / RESULT_FILE).lstat().st_mtime, dt.timezone.utc)
        except (OSError, OverflowError, ValueError):
            return -math.inf
    if written.tzinfo is None:
        written = written.replace(tzinfo=dt.timezone.utc)
    return written.timestamp() if written <= now else -math.inf


def claimed_here(run_dir: Path) -> bool:
    """Whether `run_dir` was claimed by a process of this machine (its claim names this host)."""
    try:
        return read_claim(run_dir)[1] == socket.gethostname()
    except ValueError:
        return False
