"""`jaxintro runs`: the run folders, what each holds, and a safe way to remove the unfinished ones."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from jaxintro.errors import ConfigError


def run(args: argparse.Namespace) -> int:
    """List the runs under `--root`; with `--remove-unfinished`, delete those neither finished nor running."""
    from jaxintro.i18n import _, ngettext
    from jaxintro.members import kind_text
    from jaxintro.runs import list_runs, status_text

    root = Path(args.root)
    runs = list_runs(root)
    if args.json and not args.remove_unfinished:
        print(json.dumps(runs))
        return 0
    if not runs:
        print(_("No runs under {root}/ (train one with: make train)").format(root=root))
        return 0
    width = max(len(r["run_dir"]) for r in runs)
    kinds = [kind_text(r) for r in runs]
    kind_width = max(len(k) for k in kinds)
    # The words between the columns, each translated alone (outside the f-string, where extraction finds them).
    epochs_word, test_word = _("epochs"), _("test")
    for r, kind in zip(runs, kinds):
        acc = f"{100 * r['test_accuracy']:.2f}%" if r["test_accuracy"] is not None else "-"
        print(f"{r['run_dir']:<{width}}  {r['dataset']:<13} {r['model']:<8} {kind:<{kind_width}}  "
              f"{r['epochs']:>3}/{r['planned_epochs']:<3} {epochs_word}  {test_word} {acc:>7}  {status_text(r)}")
    if not args.remove_unfinished:
        return 0
    doomed = [r for r in runs if r["status"] not in ("finished", "running")]
    if not doomed:
        print(_("Nothing to remove: every run is finished or still running."))
        return 0
    print("\n" + ngettext("Will remove {n} unfinished run folder (finished and running ones are kept):",
                          "Will remove {n} unfinished run folders (finished and running ones are kept):",
                          len(doomed)).format(n=len(doomed)))
    for r in doomed:
        print(f"  {r['run_dir']}  ({status_text(r)})")
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(_("--remove-unfinished asks before deleting; add --yes to confirm without a terminal"))
        # English and Spanish answers alike: y/yes, s/si/sí.
        if input(_("Remove them? [y/N] ")).strip().lower() not in ("y", "yes", "s", "si", "sí"):
            print(_("Nothing removed."))
            return 0
    for r in doomed:
        shutil.rmtree(r["run_dir"])
    print(ngettext("Removed {n} folder.", "Removed {n} folders.", len(doomed)).format(n=len(doomed)))
    return 0
