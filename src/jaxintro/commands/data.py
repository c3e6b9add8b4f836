"""`jaxintro data`: each dataset, where it would load from, and whether it verifies."""

from __future__ import annotations

import argparse

from jaxintro.data import describe_sources
from jaxintro.jsonio import json_text


def run(args: argparse.Namespace) -> int:
    """Print (or `--json`) one row per dataset."""
    rows = describe_sources(args.data_dir)
    if args.json:
        print(json_text(rows))
        return 0
    width = max(len(r["dataset"]) for r in rows)
    for r in rows:
        print(f"{r['dataset']:<{width}}  {r['source']}\n{'':<{width}}  {r['status']}")
    return 0
