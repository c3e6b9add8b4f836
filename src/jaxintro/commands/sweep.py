"""`jaxintro sweep`: a grid of learning rates (and weight decays) x seeds, trained as one compiled program.

A sweep is a `train` run whose members differ in hyper-parameters: the same run folder, checkpoints,
`--resume`, `evaluate` and `predict`; `train` prints its table of settings and draws `sweep.png`.
"""

from __future__ import annotations

import argparse

from jaxintro.commands import train


def run(args: argparse.Namespace) -> int:
    """Train the grid as one `train` run on one process."""
    # What `train` reads that a sweep does not offer: it is always a new run on one process.
    for name in ("resume", "coordinator", "num_processes", "process_id"):
        setattr(args, name, None)
    return train.run(args)
