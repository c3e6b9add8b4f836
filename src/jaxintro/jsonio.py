"""JSON in and out of jaxintro: strict going out (NaN and infinities as null, never the bare `NaN` Python writes),
untrusted coming in (a run folder may come from someone else: every number it holds is bounded as it is parsed)."""

from __future__ import annotations

import json
import math
from typing import Any

from jaxintro.i18n import _


def json_safe(value: Any) -> Any:
    """`value` as JSON can hold it: NaN and infinities (a row that did not run, a member that diverged) become null.

    `json.dumps` would write a bare `NaN`, which is not JSON.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def json_text(value: Any) -> str:
    """`value` as one line of strict JSON (NaN and infinities as null): what every `--json` prints."""
    return json.dumps(json_safe(value), allow_nan=False)


def parse_json(text: str, name: str) -> Any:
    """`text` as JSON, with every number as untrusted as the rest: NaN, infinities and floats that overflow read as
    null, as jaxintro writes them; an integer beyond float64's exact range (a 400-digit epoch) is a ValueError naming
    the file, as is deep nesting."""
    try:
        return json.loads(text, parse_int=_exact_int, parse_float=_finite_float, parse_constant=lambda _name: None)
    except OutOfRange as exc:
        raise ValueError(_("{name}: {error}").format(name=name, error=exc)) from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(_("{name}: not JSON ({error})").format(name=name, error=str(exc)[:100])) from None


class OutOfRange(ValueError):
    """A number in a run folder's JSON that no value jaxintro writes could be."""


def _exact_int(text: str) -> int:
    if len(text.lstrip("-")) > 16 or abs(int(text)) > 2**53:  # past it, a float is no longer exact, and may overflow
        raise OutOfRange(_("an integer out of range ({digits} digits)").format(digits=len(text.lstrip("-"))))
    return int(text)


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None
