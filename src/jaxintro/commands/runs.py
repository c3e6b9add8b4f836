"""`jaxintro runs`: the run folders, what each holds, and a safe way to remove the unfinished ones."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxintro.errors import ConfigError
from jaxintro.i18n import _, format_number, ngettext, printable
from jaxintro.jsonio import json_text
from jaxintro.listing import keep_reason, kind_text, list_runs, remove_run_dir, status_text


def run(args: argparse.Namespace) -> int:
    """List the runs under `--root`; with `--remove-unfinished`, delete those neither finished nor running."""
    root = Path(args.root)
    runs = list_runs(root)
    if args.json and not args.remove_unfinished:
        print(json_text(runs))
        return 0
    if not runs:
        print(_("No runs under {root}/ (train one with: make train)").format(root=root))
        return 0
    # A folder's name and its config come from whoever made it: escaped, they cannot drive the terminal.
    shown = [{key: printable(r[key]) for key in ("run_dir", "dataset", "model")} for r in runs]
    status = [printable(status_text(r)) for r in runs]
    width = max(len(s["run_dir"]) for s in shown)
    kinds = [kind_text(r) for r in runs]
    kind_width = max(len(k) for k in kinds)
    # The words between the columns, each translated alone (outside the f-string, where extraction finds them).
    epochs_word, test_word = _("epochs"), _("test")
    for r, s, kind, state in zip(runs, shown, kinds, status):
        acc = format_number(r["test_accuracy"], ".2%") if r["test_accuracy"] is not None else "-"
        print(f"{s['run_dir']:<{width}}  {s['dataset']:<13} {s['model']:<8} {kind:<{kind_width}}  "
              f"{r['epochs']:>3}/{r['planned_epochs']:<3} {epochs_word}  {test_word} {acc:>7}  {state}")
    if not args.remove_unfinished:
        return 0
    # Everything is decided before anything is deleted.
    unfinished = [(r, keep_reason(r), s) for r, s in zip(runs, shown) if r["status"] not in ("finished", "running")]
    doomed = [(r, s) for r, why, s in unfinished if why is None]
    for _r, why, s in unfinished:
        if why is not None:
            print(_("Keeping {run_dir}: {why}").format(run_dir=s["run_dir"], why=printable(why)))
    if not doomed:
        print(_("Nothing to remove: every run is finished, running, or holds a checkpoint."))
        return 0
    print("\n" + ngettext("Will remove {n} unfinished run folder (no checkpoint, nobody running it):",
                          "Will remove {n} unfinished run folders (no checkpoint, nobody running them):",
                          len(doomed)).format(n=len(doomed)))
    for r, s in doomed:
        print(f"  {s['run_dir']}  ({printable(status_text(r))})")
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(_("--remove-unfinished asks before deleting; add --yes to confirm without a terminal"))
        # English and Spanish answers alike: y/yes, s/si/sí.
        if input(_("Remove them? [y/N] ")).strip().lower() not in ("y", "yes", "s", "si", "sí"):
            print(_("Nothing removed."))
            return 0
    removed = sum(remove_run_dir(Path(r["run_dir"])) for r, _s in doomed)
    print(ngettext("Removed {n} folder.", "Removed {n} folders.", removed).format(n=removed))
    if removed < len(doomed):
        print(_("Kept {n} that changed since they were listed (a run claimed it, or it gained a checkpoint).").format(
            n=len(doomed) - removed))
    return 0
