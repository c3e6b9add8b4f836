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
    from jaxintro.runs import list_runs

    root = Path(args.root)
    runs = list_runs(root)
    if args.json and not args.remove_unfinished:
        print(json.dumps(runs))
        return 0
    if not runs:
        print(f"No runs under {root}/ (train one with: make train)")
        return 0
    width = max(len(r["run_dir"]) for r in runs)
    for r in runs:
        acc = f"{100 * r['test_accuracy']:.2f}%" if r["test_accuracy"] is not None else "-"
        print(f"{r['run_dir']:<{width}}  {r['dataset']:<13} {r['model']:<8} "
              f"{r['epochs']:>3}/{r['planned_epochs']:<3} epochs  test {acc:>7}  {r['status']}")
    if not args.remove_unfinished:
        return 0
    doomed = [r for r in runs if r["status"] not in ("finished", "running")]
    if not doomed:
        print("Nothing to remove: every run is finished or still running.")
        return 0
    print(f"\nWill remove {len(doomed)} unfinished run folder(s) (finished and running ones are kept):")
    for r in doomed:
        print(f"  {r['run_dir']}  ({r['status']})")
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("--remove-unfinished asks before deleting; add --yes to confirm without a terminal")
        if input("Remove them? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing removed.")
            return 0
    for r in doomed:
        shutil.rmtree(r["run_dir"])
    print(f"Removed {len(doomed)} folder(s).")
    return 0
