"""What every check shares: the failure a learner reads, calling their code, random inputs, comparisons.

A check takes the learner's file (a `learner.Learner`) and calls its functions by name, each call
crossing to the process that runs the file; it returns when everything holds and raises
`CheckFailed(key, message)` at the first thing that does not. The key is stable (tests and
`--json` read it); the message, in the learner's language, names the concrete input that broke.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings

from jaxintro.exercises.learner import Function, LearnerRaised
from jaxintro.i18n import _, decimal_comma, list_separator


class CheckFailed(Exception):
    """A check that did not hold: a stable `key` and a message for the learner."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def attempt(fn: Callable, *args: Any, name: str, inputs: str, branch_fix: str | None = None, **kwargs: Any) -> Any:
    """Call the learner's `fn`; turn what it raises into a `CheckFailed` that says what to look at.

    `branch_fix`: what replaces a Python `if` on a traced value here (default: `jax.lax.cond` or `jnp.where`;
    exercise 9, whose gradient `jnp.where` poisons, says only `jax.lax.cond`).
    """
    try:
        return fn(*args, **kwargs)
    except LearnerRaised as exc:  # the learner's bug, whatever it is, is reported, not raised
        raise _classified(exc, name, inputs, branch_fix) from exc


def raised_behind(failed: CheckFailed, *kinds: str) -> LearnerRaised | None:
    """What the learner's code raised behind `failed` (an `attempt`'s), if it is an exception of one of `kinds`: for a
    check that tells a known mistake by the error it makes."""
    exc = failed.__cause__
    return exc if isinstance(exc, LearnerRaised) and exc.kinds & set(kinds) else None


def _classified(exc: LearnerRaised, name: str, inputs: str, branch_fix: str | None) -> CheckFailed:
    """What the learner's code raised, as the failure a learner reads: the common JAX mistakes by their key."""
    line = exc.line or "?"
    if "NotImplementedError" in exc.kinds:
        return CheckFailed("not_implemented", _("{name} still raises NotImplementedError: write it where the TODO "
                                                "is").format(name=name))
    if "KeyReuseError" in exc.kinds:
        return CheckFailed("key_reused", _(
            "{name}({inputs}): line {line} uses a key that was already used (JAX's key-reuse checker: {detail}); a "
            "key is used once: split it, draw with each new key once, and keep one of them to split again").format(
            name=name, inputs=inputs, line=line, detail=exc.first_line(120)))
    if exc.kinds & {"TracerBoolConversionError", "ConcretizationTypeError"} and _TRUTH_OF_A_KEY.search(exc.source):
        return CheckFailed("truth_of_a_key", _(
            "{name}({inputs}) under jax.jit: line {line} asks a key for True or False (`{code}`); to know whether a "
            "key was given, compare it with None: `if key is not None:` is a Python test of a Python value, fine "
            "under jit").format(name=name, inputs=inputs, line=line, code=exc.source))
    if "ConcretizationTypeError" in exc.kinds and _TO_A_NUMBER.search(exc.source):
        return CheckFailed("number_from_traced", _(
            "{name}({inputs}) under jax.jit: line {line} turns a traced array into a Python number (`{code}`); under "
            "jit there is no number yet, only its shape: keep it an array (jnp's functions take arrays) and convert "
            "it, if ever, outside the jitted function").format(name=name, inputs=inputs, line=line, code=exc.source))
    if exc.kinds & {"TracerBoolConversionError", "ConcretizationTypeError"}:
        return CheckFailed("python_if_on_traced", _(
            "{name}({inputs}) under jax.jit: line {line} needs a concrete value (a Python `if`, `bool()`, "
            "`float()` or `int()` on a traced array); under jit an array is a tracer: use {fix}").format(
            name=name, inputs=inputs, line=line, fix=branch_fix or _("jax.lax.cond or jnp.where")))
    if "TracerArrayConversionError" in exc.kinds:
        return CheckFailed("numpy_on_traced", _(
            "{name}({inputs}) under jax.jit: line {line} turns a traced array into a NumPy array; use jax.numpy "
            "(jnp) inside functions that are jitted").format(name=name, inputs=inputs, line=line))
    if "TypeError" in exc.kinds and ("immutable" in exc.message or "does not support item assignment" in exc.message):
        return CheckFailed("item_assignment", _(
            "{name}({inputs}): line {line} assigns into an array (a[i] = ...); JAX arrays are immutable: "
            "a.at[i].set(...) returns the updated copy").format(name=name, inputs=inputs, line=line))
    return _raised(exc, name, inputs)


# The learner's line, read for what it asks of a traced value: the truth of a key (`if key:`, `if not key`), a Python
# number (`float(x)`, `int(x)`, `x.item()`).
_TRUTH_OF_A_KEY = re.compile(r"\b(if|while|and|or|not)\s+(not\s+)?\w*key\w*\s*(:|and\b|or\b|else\b|\))")
_TO_A_NUMBER = re.compile(r"\b(float|int|complex)\(|\.item\(\)|\.tolist\(\)")


def _raised(exc: LearnerRaised, name: str, inputs: str) -> CheckFailed:
    said = _("{name}({inputs}) raised {error}: {detail} (line {line} of your file)").format(
        name=name, inputs=inputs, error=exc.type_name, detail=exc.first_line(), line=exc.line or "?")
    look = what_to_look_at(exc)
    return CheckFailed("raised", f"{said}; {look}" if look else said)


def what_to_look_at(exc: LearnerRaised) -> str:
    """A sentence on where a common error of JAX or Python comes from in a learner's code ("" for any other)."""
    text = exc.message
    if "TypeError" in exc.kinds and text.startswith("cannot reshape array"):
        return _("a reshape keeps the number of elements, and a size written into the code holds only for the "
                 "inputs you had in mind: take sizes from the arrays (x.shape[0], -1), so that the batch axis and "
                 "every other size follow the inputs above")
    if "TypeError" in exc.kinds and "one_hot() missing" in text:
        return _("jax.nn.one_hot(labels, num_classes) needs the number of classes: the logits' last axis, "
                 "logits.shape[-1]")
    if "Incompatible shapes for broadcasting" in text:
        return _("shapes broadcast from their last axis: compare the shapes above from the right; one value per row "
                 "(shape (n,)) against rows (shape (n, m)) needs a last axis of 1 first, v[:, None]")
    if "KeyError" in exc.kinds and "Tracer" in text:
        return _("the key {key} was built from a traced value: a loop index of jax.lax.fori_loop (or any value under "
                 "jit) is a tracer, not a number; a Python for loop gives each key as plain text").format(key=text)
    if "KeyError" in exc.kinds:
        return _("the dictionary has no key {key}: print its keys to see how they are named and numbered, and "
                 "which ones your loop asks for").format(key=text)
    return ""


def examples(strategy: Any, n: int = 6) -> Callable[[Callable], Callable[[], None]]:
    """Run the decorated check on `n` inputs drawn by Hypothesis (reproducible, no database, no shrinking).

    Shrinking would re-run (and re-compile) the learner's function dozens of times; the strategies
    draw small inputs first instead, so the first failure is already a small one.
    """
    policy = settings(max_examples=n, deadline=None, database=None, derandomize=True,
                      phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
                      report_multiple_bugs=False, print_blob=False)
    return lambda fn: policy(given(strategy)(fn))


def close(a: Any, b: Any, *, tol: float = 1e-4) -> bool:
    """Same pytree structure, shapes and values (relative and absolute tolerance `tol`)."""
    try:
        la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
        if jax.tree.structure(a) != jax.tree.structure(b) or len(la) != len(lb):
            return False
        return all(np.shape(x) == np.shape(y) and np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                                               rtol=tol, atol=tol, equal_nan=False)
                   for x, y in zip(la, lb))
    except (TypeError, ValueError):
        return False


class KeysLast:
    """The learner's function called with JAX's key-reuse checker on (as every call is unless `keys_unchecked`); a
    `KeyReuseError` is kept, and that call made again with the checker off, so that a check reads the values first
    (what they show says more than the checker's "consumed key") and `raise_reuse` fails last. No second compile for
    an answer that uses each key once: its checked calls are its calls."""

    def __init__(self, fn: Function) -> None:
        self.checked, self.unchecked, self.reused = fn, fn.keys_unchecked(), None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.reused is None:
            try:
                return self.checked(*args, **kwargs)
            except LearnerRaised as exc:
                if "KeyReuseError" not in exc.kinds:
                    raise
                self.reused = exc
        return self.unchecked(*args, **kwargs)

    def raise_reuse(self, *, name: str, inputs: str) -> None:
        """The `CheckFailed("key_reused")` of the first key used twice, naming the line; nothing if none was."""
        if self.reused is not None:
            raise _classified(self.reused, name, inputs, None)


def require_finite(got: Any, name: str, inputs: str) -> None:
    """A `CheckFailed("not_finite")` where the learner's value holds a NaN or an infinity that the reference, finite,
    does not: a comparison with NaN is False either way, so no check may let one decide (or pass) by a `<` or `>`."""
    leaves = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(got)
              if np.issubdtype(np.asarray(leaf).dtype, np.number)]
    bad = next((leaf for leaf in leaves if not np.all(np.isfinite(leaf))), None)
    if bad is not None:
        raise CheckFailed("not_finite", _(
            "{name}({inputs}) gave {values}, where the lesson's answer is finite: a NaN comes from 0/0, the log or "
            "the square root of a negative number, inf - inf; an infinity from an overflow or a division by 0"
        ).format(name=name, inputs=inputs, values=numbers(bad.ravel()[:6])))


def require_no_loop(fn: Function, name: str, *args) -> None:
    """A `CheckFailed` where `fn`'s program walks the batch in a loop (`lax.map`, `fori_loop`, `scan`, `while_loop`):
    one example at a time, in order, where `vmap` computes the whole batch as one batched operation."""
    loops = fn.primitives(*args) & {"scan", "while"}
    if loops:
        raise CheckFailed("loop_not_vmap", _(
            "{name}'s program holds a loop ({loops}: jax.lax.map, fori_loop or scan), which handles one example after "
            "the other; the exercise is jax.vmap, which turns the function of one example into one of a batch, run "
            "as batched operations all at once").format(name=name, loops=", ".join(sorted(loops))))


def require_dtype_kept(got, want, name: str, inputs: str) -> None:
    """A `CheckFailed("dtype_changed")` where a leaf of `got` has another dtype than `want`'s."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        if np.dtype(getattr(g, "dtype", np.float64)) != np.dtype(w.dtype):
            raise CheckFailed("dtype_changed", _(
                "{name}({inputs}) turned an array of {want} into {got}: jnp's operations keep an array's dtype "
                "(.at[].set, p - lr * g and jnp.sqrt all do); a cast (astype, a float32 written into the code) changes "
                "it").format(
                name=name, inputs=inputs, want=np.dtype(w.dtype).name, got=np.dtype(g.dtype).name))


def shape_of(tree: Any) -> str:
    """A short description of a pytree's shapes, for messages: {'layer1': {'b': (3,), 'w': (4, 3)}}."""
    return str(jax.tree.map(lambda leaf: tuple(np.shape(leaf)), tree))


def make_params(seed: int, sizes: tuple[int, ...]) -> dict:
    """Random MLP parameters of `sizes` in the lesson's layout (biases non-zero, so a lost bias shows).

    Drawn with NumPy, not jax.random: every new shape would compile a JAX program, and a check
    should spend its time compiling the learner's function, not its own inputs.
    """
    rng = np.random.default_rng(seed)
    return {f"layer{i + 1}": {"w": jnp.asarray(rng.normal(size=(a, b)) / np.sqrt(a), jnp.float32),
                              "b": jnp.asarray(0.5 * rng.normal(size=b), jnp.float32)}
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))}


def make_batch(seed: int, batch: int, features: int, classes: int) -> tuple[jax.Array, jax.Array]:
    """A random batch (NumPy-drawn): inputs (batch, features) and integer labels (batch,)."""
    rng = np.random.default_rng(seed + 1000)
    return (jnp.asarray(rng.normal(size=(batch, features)), jnp.float32),
            jnp.asarray(rng.integers(0, classes, size=batch), jnp.int32))


def numpy_tree(tree: Any) -> Any:
    """Every leaf as a float64 NumPy array (references are computed in NumPy: nothing to compile)."""
    return jax.tree.map(lambda leaf: np.asarray(leaf, np.float64), tree)


def describe(**values: Any) -> str:
    """`name=value` pairs for a message (arrays by shape)."""
    return ", ".join(f"{k}={_brief(v)}" for k, v in values.items())


def _brief(value: Any) -> str:
    if isinstance(value, str):
        return value
    if hasattr(value, "shape") and np.ndim(value) > 0:
        return _("array of shape {shape}").format(shape=tuple(np.shape(value)))
    if isinstance(value, dict):
        try:  # the lesson's MLP layout reads best as its sizes
            ws = [np.shape(value[f"layer{i + 1}"]["w"]) for i in range(len(value))]
            return _("params of sizes {sizes}").format(sizes=(*[w[0] for w in ws], ws[-1][1]))
        except (KeyError, IndexError, TypeError):
            pass
        return _("a pytree of shapes {shapes}").format(shapes=shape_of(value))
    if isinstance(value, (list, tuple)) and any(hasattr(leaf, "shape") for leaf in jax.tree.leaves(value)):
        return _("a pytree of shapes {shapes}").format(shapes=shape_of(value))  # arrays' reprs span lines
    return repr(value)


def numbers(value: Any) -> str:
    """An array's values for a message, 3 decimals, as the learner's language writes numbers (a decimal comma, and
    then "; " between values, in Spanish)."""
    mark = "," if decimal_comma() else "."
    text = np.array2string(np.asarray(value, np.float64), separator=list_separator(), threshold=12, formatter={
        "float_kind": lambda v: np.format_float_positional(v, precision=3, trim="-").replace(".", mark)})
    return " ".join(text.split())  # one line, whatever the shape


def key_text(seed: int) -> str:
    """How a message names a key: jax.random.key(seed)."""
    return f"jax.random.key({seed})"


def unchanged(before: Any, after: Any) -> bool:
    """True when the same values sit at the same places (the learner did not mutate an input)."""
    return close(before, after, tol=0.0)
