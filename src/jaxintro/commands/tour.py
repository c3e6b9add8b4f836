"""`jaxintro tour`: every concept of the lesson, run and printed with real values."""

from __future__ import annotations

import argparse

from jaxintro.errors import ConfigError
from jaxintro.i18n import _


def run(args: argparse.Namespace) -> int:
    """Run every section, or one, or list them."""
    from jaxintro.tour import SECTIONS, run_tour, title

    if args.list:
        for name in SECTIONS:
            print(f"{name:<14}{title(name)}")
        return 0
    if args.section is not None and args.section not in SECTIONS:
        raise ConfigError(_("--section must be one of {choices}; got {value}").format(
            choices=", ".join(SECTIONS), value=repr(args.section)))
    import jax

    try:  # the sharding section wants several devices; on a CPU they are created here
        jax.config.update("jax_num_cpu_devices", args.devices)
    except RuntimeError:
        pass  # JAX already started in this process: use the devices it has
    run_tour([args.section] if args.section else list(SECTIONS))
    return 0
