"""What crosses between the checker and the process that runs the learner's file: data, never code.

A message is a JSON header and the raw bytes of the arrays it names. Reading one builds only data:
dicts, lists, tuples, numbers, strings, NumPy or JAX arrays of numbers, PRNG keys, a named tuple's
fields (a `record` of the same name), a `Handle` (an object that stays in the learner's process,
named by number) and a `Prop` (something the checker asks that process to build: a stand-in
function, an Optax optimizer). Unlike pickle, nothing in a message runs code in the process that
reads it. On a pipe a frame starts with `MAGIC` and its length, so bytes the learner's code writes
there are seen as garbage, never read as an answer; a message is at most `MAX_FRAME` bytes, its
header `MAX_HEADER`, its values `MAX_DEPTH` deep (the learner's side sends a value deeper or bigger as a Handle).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import struct
import time
from typing import Any, Callable

import numpy as np

MAGIC = b"jaxintro"  # every frame starts with it
MAX_FRAME = 64 << 20  # bytes: above the largest message a check sends (exercise 11's identity weights, 12 MB)
MAX_HEADER = 4 << 20  # bytes of JSON: the arrays' bytes come apart, so a header is small
MAX_DEPTH = 64  # dicts, lists and tuples nested deeper are a Handle
_LENGTH = struct.Struct(">Q")
HEAD_SIZE = len(MAGIC) + _LENGTH.size  # a frame's magic and length
_NUMBERS = "biufc"  # the kinds of NumPy dtype sent as arrays: bool, ints, floats, complex


class Garbled(Exception):
    """A frame or message that is not one this module wrote."""


@dataclasses.dataclass(frozen=True)
class Handle:
    """An object held in the learner's process, by number: one that is not data (a function, an optimizer's `update`),
    or data held on purpose (`Hold`: exercise 4's optimizer states, handed back to the learner's code as they are)."""

    number: int
    kind: str  # its type's name, for messages


@dataclasses.dataclass
class Prop:
    """Something the learner's process builds from `kind` and `spec` and passes to the learner's code; what it saw
    there comes back in `observed` after each call it was part of."""

    kind: str
    spec: dict
    observed: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Hold:
    """Wraps a value the learner's side holds and sends as a Handle, even where it is data (a state to pass back)."""

    value: Any


def type_name(value: Any) -> str:
    """A value's type's name, for messages: a Handle's is that of the object it stands for."""
    return value.kind if isinstance(value, Handle) else type(value).__name__


@functools.cache  # never evicted: two records of one name and fields are always one class
def record(name: str, fields: tuple[str, ...]) -> type:
    """The named tuple class that stands for a named tuple `name` of the other process (one class per name and fields,
    so that two of them have the same pytree structure)."""
    return collections.namedtuple(name if name.isidentifier() else "Record", fields, rename=True)


def walk(value: Any) -> list:
    """The leaves of a nest of dicts, lists and tuples, in the order both sides see them (to match props to what
    they saw)."""
    if type(value) is dict:
        return [leaf for v in value.values() for leaf in walk(v)]
    if type(value) in (list, tuple):
        return [leaf for v in value for leaf in walk(v)]
    return [value]


def frame_head(message: bytes) -> bytes:
    """What goes before `message` on a pipe: the magic and its length."""
    return MAGIC + _LENGTH.pack(len(message))


def frame_length(head: bytes) -> int:
    """The length of the message after `head` (`frame_head`'s bytes, as read)."""
    if len(head) != HEAD_SIZE or not head.startswith(MAGIC):
        raise Garbled("a frame that does not start with the magic")
    (length,) = _LENGTH.unpack_from(head, len(MAGIC))
    if length > MAX_FRAME:
        raise Garbled(f"a frame of {length} bytes")
    return length


def pack(values: dict[str, Any], *, hold: Callable[[Any], int] | None = None) -> bytes:
    """One message of `values`. `hold(obj)` stores an object that is not data (only the learner's side has one) and
    returns its number; without it (the checker's side) such an object is a TypeError, as a value too deep or big."""
    arrays: list[bytes] = []
    body = {name: _encode(value, arrays, hold, 0) for name, value in values.items()}
    text = json.dumps({"body": body, "sizes": [len(a) for a in arrays]}).encode()
    return b"".join([_LENGTH.pack(len(text)), text, *arrays])


class OutOfTime(Exception):
    """Decoding a message ran past its deadline (a message of thousands of arrays takes long to rebuild)."""


def unpack(message: bytes, *, handle: Callable[[dict], Any] = lambda h: Handle(h["h"], str(h["kind"])),
           prop: Callable[[dict], Any] | None = None, deadline: float = float("inf")) -> dict:
    """The values of `message`; `handle` and `prop` build what a handle or a prop stands for on this side (a prop from
    the other side is garbage unless `prop` is given); `OutOfTime` once `time.monotonic()` passes `deadline`."""
    try:
        (size,) = _LENGTH.unpack_from(message)
        if size > MAX_HEADER:
            raise Garbled(f"a header of {size} bytes")
        meta = json.loads(message[_LENGTH.size:_LENGTH.size + size])
        arrays, start = [], _LENGTH.size + size
        for length in meta["sizes"]:
            arrays.append(message[start:start + int(length)])
            start += int(length)
        if start != len(message):
            raise Garbled("the arrays' sizes do not add up to the message")
        return {str(name): _decode(value, arrays, handle, prop, 0, deadline) for name, value in meta["body"].items()}
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            OverflowError) as exc:  # OverflowError: a size of Infinity
        raise Garbled(f"{type(exc).__name__}: {exc}") from exc


def fits(message: bytes) -> bool:
    """Whether `message` can be sent: within `MAX_FRAME`, its header within `MAX_HEADER`."""
    return len(message) <= MAX_FRAME and _LENGTH.unpack_from(message)[0] <= MAX_HEADER


def _encode(value: Any, arrays: list[bytes], hold: Callable[[Any], int] | None, depth: int) -> Any:
    encode = functools.partial(_encode, arrays=arrays, hold=hold, depth=depth + 1)
    if value is None or type(value) in (bool, int, float, str):
        return value
    array = _as_array(value)
    if array is not None:
        return _encode_array(value, array, arrays)
    if isinstance(value, (bool, int, float, str)):  # an enum member, a subclass: its plain value
        return next(kind(value) for kind in (bool, int, float, str) if isinstance(value, kind))
    if isinstance(value, Handle):
        return {"h": value.number, "kind": value.kind}
    if isinstance(value, Prop):
        return {"p": value.kind, "spec": encode(value.spec)}
    if hold is not None and (isinstance(value, Hold) or depth >= MAX_DEPTH):
        held = value.value if isinstance(value, Hold) else value
        return {"h": hold(held), "kind": type(held).__name__}
    if type(value) is dict:
        return {"d": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"n": type(value).__name__, "f": [str(f) for f in value._fields], "v": [encode(v) for v in value]}
    if type(value) in (list, tuple):
        return {"l" if type(value) is list else "t": [encode(v) for v in value]}
    if _is_jax(value) and _is_key(value):
        return _encode_key(value, arrays)
    if hold is None:
        raise TypeError(f"not data: {type(value).__name__}")
    return {"h": hold(value), "kind": type(value).__name__}


def _as_array(value: Any) -> np.ndarray | None:
    """`value` as a NumPy array, when it is an array or an array scalar of numbers, of NumPy or JAX."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
    elif _is_jax(value) and not _is_key(value):
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 (a tracer that escaped, a deleted buffer: not data)
            return None
    else:
        return None
    if array.dtype.kind not in _NUMBERS and array.dtype.type.__module__ != "ml_dtypes":  # bfloat16 & co. are kind V
        return None  # strings, bytes, records, objects: not numbers
    return array


def _is_jax(value: Any) -> bool:
    return type(value).__module__.startswith(("jax", "jaxlib")) and hasattr(value, "dtype") and hasattr(value, "shape")


def _is_key(value: Any) -> bool:
    import jax

    return jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key)


def _encode_array(value: Any, array: np.ndarray, arrays: list[bytes]) -> dict:
    array = array.astype(array.dtype.newbyteorder("="), copy=False)  # this machine's byte order
    arrays.append(array.tobytes())  # in C order, whatever the array's own
    kind = "jax" if _is_jax(value) else "scalar" if isinstance(value, np.generic) else "numpy"
    return {"a": len(arrays) - 1, "dtype": array.dtype.name, "shape": list(array.shape), "kind": kind}


def _encode_key(value: Any, arrays: list[bytes]) -> dict:
    """A typed PRNG key array: its implementation's name and its data."""
    import jax

    data = np.asarray(jax.random.key_data(value))
    return {"key": str(jax.random.key_impl(value)), "data": _encode_array(data, data, arrays)}


def _decode(value: Any, arrays: list[bytes], handle: Callable, prop: Callable | None, depth: int,
            deadline: float) -> Any:
    if depth > MAX_DEPTH + 1:
        raise Garbled("nested deeper than a message is")
    if time.monotonic() > deadline:
        raise OutOfTime("the message took longer to read than the check may take")
    decode = functools.partial(_decode, arrays=arrays, handle=handle, prop=prop, depth=depth + 1, deadline=deadline)
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is not dict or len(value) == 0:
        raise Garbled(f"not a value: {str(value)[:40]}")
    if "d" in value:
        return {decode(k): decode(v) for k, v in value["d"]}
    if "l" in value:
        return [decode(v) for v in value["l"]]
    if "t" in value:
        return tuple(decode(v) for v in value["t"])
    if "n" in value:
        return record(str(value["n"]), tuple(map(str, value["f"])))(*map(decode, value["v"]))
    if "a" in value:
        return _decode_array(value, arrays)
    if "key" in value:
        import jax

        return jax.random.wrap_key_data(_decode_array(value["data"], arrays), impl=str(value["key"]))
    if "h" in value:
        return handle(value)
    if "p" in value and prop is not None:
        return prop({"kind": value["p"], "spec": decode(value["spec"])})
    raise Garbled(f"not a value: {str(value)[:40]}")


def _decode_array(value: dict, arrays: list[bytes]) -> Any:
    import jax
    import jax.numpy as jnp

    dtype = np.dtype(str(value["dtype"]))  # bfloat16 and the other ml_dtypes by name, once JAX has loaded them
    array = np.frombuffer(arrays[value["a"]], dtype=dtype).reshape([int(n) for n in value["shape"]])
    # A JAX array stays one, unless this side's JAX would narrow its dtype (float64 where x64 is off): then NumPy's.
    if value["kind"] == "jax" and jax.dtypes.canonicalize_dtype(dtype) == dtype:
        return jnp.asarray(array)
    return array[()] if value["kind"] == "scalar" else array.copy()  # writable, as an array the caller made
