"""The page's JSON API without the network: what a request may send and ask, each refusal an `ApiError`.

Pure functions of bytes and strings, checked before anything reaches the model: `serve.py` binds the
port and answers; this module decides what a request means, and which addresses a server is seen at.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import urllib.parse
from typing import Any

import numpy as np

from jaxintro.errors import DataError
from jaxintro.i18n import _, ngettext
from jaxintro.images import check_ink

MAX_PAGE_SIZE = 100  # mistakes per request
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# How the mistakes panel can order the mistakes (`?sort=`): by gradient norm, largest or smallest first, or by index.
MISTAKE_SORTS = ("norm", "norm_asc", "index")


class ApiError(Exception):
    """A request the API refuses: an HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _refuse_constant(name: str) -> float:
    raise ApiError(400, _("{name} is not a number the API accepts; send numbers in [0, 1]").format(name=name))


def parse_predict_request(body: bytes, features: int) -> tuple[str, Any]:
    """`("pixels", float32 array)` or `("image", bytes)` from a predict request's JSON, else an ApiError (400)."""
    try:
        payload = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise ApiError(400, _("malformed JSON (nested too deeply)")) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, _("malformed JSON ({error})").format(error=exc)) from None
    if not isinstance(payload, dict) or len({"pixels", "image"} & payload.keys()) != 1:
        raise ApiError(400, _('expected a JSON object with exactly one of "pixels" (a list of numbers in [0, 1]) '
                              'or "image" (a PNG or JPEG as a data URL)'))
    if "image" in payload:
        url = payload["image"]
        head, sep, data = url.partition(",") if isinstance(url, str) else ("", "", "")
        if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
            raise ApiError(400, _('"image" must be a data URL: data:image/png;base64,...'))
        try:
            return "image", base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, _('"image": the data URL holds invalid base64')) from None
    pixels = payload["pixels"]
    if not isinstance(pixels, list) or len(pixels) != features:
        got = (ngettext("{n} value", "{n} values", len(pixels)).format(n=len(pixels)) if isinstance(pixels, list)
               else type(pixels).__name__)
        raise ApiError(400, _('"pixels" must be a list of {features} numbers in [0, 1]; got {got}').format(
            features=features, got=got))
    if not all(type(v) in (int, float) for v in pixels):
        raise ApiError(400, _('"pixels" must hold numbers only (no strings, booleans or null)'))
    # An integer too large for a float (hundreds of digits) is far outside [0, 1] too.
    bad = [i for i, v in enumerate(pixels) if type(v) is int and not 0 <= v <= 1]
    if bad:
        raise ApiError(400, _('"pixels"[{i}] = {value} is outside [0, 1]').format(
            i=bad[0], value=str(pixels[bad[0]])[:20] + ("..." if len(str(pixels[bad[0]])) > 20 else "")))
    x = np.asarray(pixels, np.float64)
    bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x > 1))
    if bad.size:
        raise ApiError(400, _('"pixels"[{i}] = {value} is outside [0, 1]').format(i=bad[0], value=repr(pixels[bad[0]])))
    try:  # the rule for an image too: no ink, no guess
        check_ink(255.0 * x, _('"pixels"'))
    except DataError as exc:
        raise ApiError(400, str(exc)) from None
    return "pixels", x.astype(np.float32)


def parse_page_query(query: str) -> tuple[int, int, str]:
    """`offset`, `limit` and `sort` of a mistakes request, validated (ApiError 400 otherwise)."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ApiError(400, _("malformed query string")) from None
    unknown = set(params) - {"offset", "limit", "sort"}
    if unknown:
        raise ApiError(400, _("unknown parameter(s) {names}; use offset, limit and sort").format(
            names=", ".join(sorted(unknown))))

    def integer(name: str, default: int, low: int, high: int) -> int:
        text = params.get(name, [str(default)])[-1]
        try:
            value = int(text)
        except ValueError:
            raise ApiError(400, _("{name} must be an integer; got {value}").format(
                name=name, value=repr(text))) from None
        if not low <= value <= high:
            raise ApiError(400, _("{name} must be in {low}..{high}; got {value}").format(
                name=name, low=low, high=high, value=value))
        return value

    sort = params.get("sort", ["norm"])[-1]
    if sort not in MISTAKE_SORTS:
        raise ApiError(400, _("sort must be one of {choices}; got {value}").format(
            choices=", ".join(MISTAKE_SORTS), value=repr(sort)))
    return integer("offset", 0, 0, 10**9), integer("limit", 24, 1, MAX_PAGE_SIZE), sort


def host_warning(host: str) -> str | None:
    """The warning to print when `host` exposes the server beyond this machine."""
    if host in LOCAL_HOSTS or _is_loopback(host):
        return None
    return _("WARNING: --host {host} serves the page and its API to the network: anyone who can reach this "
             "machine can use them. Use --host 127.0.0.1 (the default) to keep it local.").format(host=host)


def _is_loopback(host: str) -> bool:
    """Whether `host` is an IP literal of this machine's loopback (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def page_url(bound: str, port: int) -> str:
    """The address to open on this machine for a server bound to `bound`: every interface includes this one."""
    address = ipaddress.ip_address(bound.split("%")[0])
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"http://[{address}]:{port}/" if address.version == 6 else f"http://{address}:{port}/"
