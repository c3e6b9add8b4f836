"""`jaxintro serve [RUN_DIR]`: a local page to draw a digit and see what the model sees (see `jaxintro.serve`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    """Serve the page and its JSON API for a run until Ctrl-C or SIGTERM."""
    from jaxintro.serve import serve

    return serve(Path(args.run_dir) if args.run_dir else None, host=args.host, port=args.port,
                 open_browser=args.open, data_dir=args.data_dir, setting=args.setting)
