"""Flag values: each type `argparse` calls on a flag's text, refusing a bad one in one line that says what it wants."""

from __future__ import annotations

import argparse

from jaxintro.i18n import _

HIGHEST_PORT = 65535


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def natural_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = _int_at_least(text, 0)
    if value > HIGHEST_PORT:
        raise argparse.ArgumentTypeError(_("expected a port from 0 to {highest}, got {value}").format(
            highest=HIGHEST_PORT, value=value))
    return value


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected an integer, got {value}").format(value=repr(text))) from None
    if value < low:
        raise argparse.ArgumentTypeError(_("expected an integer >= {low}, got {value}").format(low=low, value=value))
    return value


def fraction(text: str) -> float:
    """A fraction strictly between 0 and 1: `--target 0.98` is 98 % of the test images."""
    value = number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(_("expected a fraction between 0 and 1 (0.98 is 98%), got {value}").format(
            value=text))
    return value


def significance(text: str) -> float:
    """A test's level, above 0 and at most 0.5 (above it, a mean below the target could pass)."""
    value = number(text)
    if not 0 < value <= 0.5:
        raise argparse.ArgumentTypeError(_("expected a level above 0 and at most 0.5 (0.01 is the usual one), got "
                                           "{value}").format(value=text))
    return value


def number(text: str) -> float:
    """A float (range checks happen in the config, which names the flag)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected a number, got {value}").format(value=repr(text))) from None


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    value = number(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(_("expected a number of seconds >= 0, got {value}").format(value=text))
    return value
