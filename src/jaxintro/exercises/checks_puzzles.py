"""Checks of the core-idea puzzles: .at[].set, jax.tree.map, vmap's in_axes, lax.scan, lax.cond, splitting keys."""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example
from hypothesis import strategies as st

from jaxintro.exercises.checking import (CheckFailed, KeysLast, attempt, close, describe, examples, key_text,
                                         numbers, raised_behind, require_dtype_kept, require_finite, require_no_loop, unchanged)
from jaxintro.exercises.learner import Function, Learner
from jaxintro.i18n import Code, _


def _array(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def check_immutable_update(ns: Learner) -> None:
    """Equal to a NumPy copy with row i replaced, under jit with i and value traced; `a` unchanged."""
    set_row = ns["set_row"].jit()

    # The explicit cases pair each row with each value: an answer that reads the value from the index (or the
    # index from the value) cannot match them both.
    @example((1, (4,), 0, -1.5))
    @example((2, (3, 2), 2, 5.0))
    @examples(st.tuples(st.integers(0, 2**16), st.sampled_from([(4,), (3, 2)]), st.integers(0, 2),
                        st.sampled_from([5.0, -1.5])), n=4)
    def agrees(case):
        seed, shape, i, value = case
        a = _array(seed, shape)
        before = np.array(a)
        inputs = describe(a=a, i=i, value=value)
        got = attempt(set_row, a, i, value, name="set_row", inputs=inputs)
        want = before.copy()
        want[i] = value
        if not np.array_equal(np.asarray(a), before):
            raise CheckFailed("mutated_input", _("set_row({inputs}) changed `a`").format(inputs=inputs))
        if not close(got, want):
            added = before.copy()
            added[i] += value
            at_zero = before.copy()
            at_zero[0] = value
            key = ("add_not_set" if close(got, added) else "wrong_index" if i != 0 and close(got, at_zero)
                   else "mismatch")
            why = {"add_not_set": _(" (.at[i].add adds; .at[i].set replaces)"),
                   "wrong_index": _(" (row 0 changed, not row i)"), "mismatch": ""}[key]
            raise CheckFailed(key, _("set_row({inputs}) gave {got}, expected {want}{why}").format(
                inputs=inputs, got=numbers(got), want=numbers(want), why=why))

    agrees()
    # Python's own rules too: a negative index counts from the end, and the array keeps its dtype (integers here).
    a = jnp.arange(8, dtype=jnp.int32).reshape(4, 2)
    for i in (-1, 2):
        inputs = describe(a=_("an int32 array of shape (4, 2)"), i=i, value=7)
        got = attempt(set_row, a, i, 7, name="set_row", inputs=inputs)
        want = np.arange(8, dtype=np.int32).reshape(4, 2)
        want[i] = 7
        if not close(got, want):
            why = (_("no row changed: i = -1 selected none (positions compared with i, arange(n) == i, never match "
                     "-1, say); a[i] with i = -1 is the last row, as in NumPy, and a.at[i].set keeps that meaning")
                   if close(got, np.asarray(a)) else
                   _("a[i] with i = -1 is the last row, as in NumPy: a.at[i].set keeps that meaning; clipping i into "
                     "[0, n - 1] does not"))
            raise CheckFailed("negative_index" if i < 0 else "mismatch", _(
                "set_row({inputs}) gave {got}, expected {want} ({why})").format(
                inputs=inputs, got=numbers(got), want=numbers(want), why=why))
        require_dtype_kept(got, want, "set_row", inputs)
    # A row that holds an infinity and a NaN (an overflowed activation): replaced, whatever it held (0 * inf is NaN).
    a = jnp.asarray([[1.0, 2.0], [jnp.inf, jnp.nan], [3.0, 4.0]], jnp.float32)
    inputs = describe(a=_("[[1, 2], [inf, nan], [3, 4]]"), i=1, value=5.0)
    got = attempt(set_row, a, 1, 5.0, name="set_row", inputs=inputs)
    if not close(got, want := np.asarray([[1.0, 2.0], [5.0, 5.0], [3.0, 4.0]])):
        raise CheckFailed("not_replaced", _(
            "set_row({inputs}) gave {got}, expected {want}: the row is replaced whatever it held; clearing it "
            "arithmetically (times 0, then + value) keeps an infinity or a NaN as NaN, .at[i].set does not").format(
            inputs=inputs, got=numbers(got), want=numbers(want)))


def _tree_case(seed: int, kind: str) -> tuple:
    """Params and grads of one of several shapes of pytree (not only the lesson's layout)."""
    rng = np.random.default_rng(seed)
    leaf = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)  # noqa: E731
    trees = {
        "mlp": lambda: {"layer1": {"w": leaf(3, 2), "b": leaf(2)}, "layer2": {"w": leaf(2, 1), "b": leaf(1)}},
        "list": lambda: [leaf(3), (leaf(2, 2), leaf(1))],
        "nested": lambda: {"encoder": [{"w": leaf(2)}, {"w": leaf(4)}], "scale": leaf()},
    }
    return trees[kind](), trees[kind]()


def check_tree_map(ns: Learner) -> None:
    """p - lr * g at every leaf, for any nesting; same structure; the params passed in are not changed."""
    sgd_update = ns["sgd_update"]
    params, grads = _tree_case(0, "mlp")
    inputs = describe(params=params, grads=_("a pytree like params"), lr=0.1)
    # Without jit, which hides a mutation; the params come back as the call left them there, ours stay as they were.
    _out, (after, *_rest) = attempt(sgd_update.call_returning_args, params, grads, 0.1, name="sgd_update",
                                    inputs=inputs)
    if not unchanged(params, after):
        raise CheckFailed("mutated_input", _(
            "sgd_update({inputs}) changed the params dict it was given: build a new pytree (jax.tree.map returns "
            "one) instead of assigning into the old").format(inputs=inputs))
    # NumPy leaves too (a pytree's leaves may be any arrays): `p -= lr * g` rebinds a JAX array but writes into these.
    numpy_params = jax.tree.map(np.array, params)
    _out, (after, *_rest) = attempt(sgd_update.call_returning_args, numpy_params, jax.tree.map(np.array, grads), 0.1,
                                    name="sgd_update",
                                    inputs=inputs + _(" (NumPy leaves)"))
    if not unchanged(numpy_params, after):
        raise CheckFailed("mutated_input", _(
            "sgd_update({inputs}) with NumPy arrays at the leaves changed them: `p -= lr * g` writes into a NumPy "
            "array in place (on a JAX array, which never changes, it only rebinds the name); return p - lr * g, a new "
            "array").format(inputs=inputs))
    update = sgd_update.jit()

    # Every kind of pytree at least once, whatever the draws: an answer that rebuilds tuples as lists shows there.
    @example((1, "list", 0.5))
    @example((2, "nested", 0.1))
    @examples(st.tuples(st.integers(0, 2**16), st.sampled_from(["mlp", "list", "nested"]),
                        st.sampled_from([0.1, 0.5])), n=5)
    def agrees(case):
        seed, kind, lr = case
        params, grads = _tree_case(seed, kind)
        inputs = describe(params=params, lr=lr)
        try:
            got = attempt(update, params, grads, lr, name="sgd_update", inputs=inputs)
        except CheckFailed as exc:
            if kind != "mlp" and exc.key == "raised":
                raise CheckFailed("hard_coded_structure", _(
                    "sgd_update works on the lesson's params but not on another pytree ({error}): jax.tree.map "
                    "walks any nesting of dicts, lists and tuples for you").format(error=exc.message)) from exc
            raise
        want = jax.tree.map(lambda p, g: np.asarray(p, np.float64) - lr * np.asarray(g, np.float64), params, grads)
        if jax.tree.structure(got) != jax.tree.structure(params):
            raise CheckFailed("structure", _("sgd_update({inputs}) returned a pytree of another structure: "
                                             "{got}").format(inputs=inputs, got=jax.tree.structure(got)))
        if not close(got, want):
            plus = jax.tree.map(lambda p, g: np.asarray(p, np.float64) + lr * np.asarray(g, np.float64), params, grads)
            swapped = jax.tree.map(lambda p, g: np.asarray(g, np.float64) - lr * np.asarray(p, np.float64), params,
                                   grads)
            step = jax.tree.map(lambda g: -lr * np.asarray(g, np.float64), grads)
            flat_p, flat_g, flat_got = (np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in
                                                        jax.tree.leaves(t)]) for t in (params, grads, got))
            same_sizes = flat_got.size == flat_p.size  # a leaf of another shape: no step to read a rate from
            rate = float(np.dot(flat_p - flat_got, flat_g) / np.dot(flat_g, flat_g)) if same_sizes else math.nan
            key = ("wrong_sign" if close(got, plus) else "arguments_swapped" if close(got, swapped)
                   else "update_not_params" if close(got, step)
                   else "lr_ignored" if same_sizes and close(flat_got, flat_p - rate * flat_g) else "mismatch")
            why = {"wrong_sign": _(" (p + lr * g moves up the gradient, so the loss grows; a descent step subtracts "
                                   "lr * g)"),
                   "arguments_swapped": _(" (the leaves are g - lr * p: jax.tree.map(f, params, grads) calls f(p, g), "
                                          "a leaf of params first, so the lambda's arguments come in that order)"),
                   "update_not_params": _(" (the leaves are -lr * g, the update alone: the new params are the old "
                                          "ones plus it)"),
                   "lr_ignored": _(" (the step took lr = {rate:g}, not the lr it was given: use the argument, not "
                                   "a number in the code)").format(rate=Code(round(rate, 6))),
                   "mismatch": _(": yours {got}, expected {want}").format(got=numbers(flat_got[:4]),
                                                                          want=numbers((flat_p - lr * flat_g)[:4]))}[key]
            raise CheckFailed(key, _("sgd_update({inputs}): the new leaves are not p - lr * g{why}").format(
                inputs=inputs, why=why))

    agrees()
    params = {"w": jnp.ones((2, 3), jnp.bfloat16), "b": jnp.ones(3, jnp.float16), "scale": jnp.ones((), jnp.float32)}
    inputs = describe(params=_("leaves of bfloat16, float16 and float32"), lr=0.5)
    got = attempt(update, params, params, 0.5, name="sgd_update", inputs=inputs)
    require_dtype_kept(got, params, "sgd_update", inputs)


def _predict(w, b, x):
    """The given `predict`, in NumPy, for one example."""
    return (x - x.mean()) @ w + b


def check_vmap_in_axes(ns: Learner) -> None:
    """Equal to `predict` on each row, under jit; one program for any batch (vmap, not a Python loop)."""
    batched = ns["batched_predict"]

    # Other class counts too: an answer that assumes the 2 outputs of the first case is told so.
    @example((0, 3, 3))
    @example((1, 1, 2))  # a batch of one: an answer that squeezes the batch axis away shows there
    @examples(st.tuples(st.integers(0, 2**16), st.sampled_from([3, 4]), st.sampled_from([2, 4])), n=3)
    def agrees(case):
        seed, batch, classes = case
        w, b, xs = _array(seed, (5, classes)), _array(seed + 1, (classes,)), _array(seed + 2, (batch, 5))
        inputs = describe(w=w, b=b, xs=xs)
        try:
            got = attempt(batched.jit(), w, b, xs, name="batched_predict", inputs=inputs)
        except CheckFailed as exc:
            if "vmap" in exc.message and "keyword" in exc.message or "len(args)=0" in exc.message:
                raise CheckFailed("vmap_keyword_arguments", _(
                    "batched_predict({inputs}): vmap maps positional arguments only, and in_axes counts them ({error}): "
                    "pass w, b and the examples by position, in the order of in_axes").format(
                    inputs=inputs, error=exc.message.splitlines()[0][:160])) from exc
            if "vmap" in exc.message:
                raise CheckFailed("in_axes_params_batched", _(
                    "batched_predict({inputs}): vmap tried to map over w or b too ({error}): w and b are the same "
                    "for every example; in_axes says, argument by argument, which axis to map (0) or that it maps "
                    "none (None)").format(inputs=inputs, error=exc.message)) from exc
            raise
        rows = [np.asarray(x, np.float64) for x in np.asarray(xs)]
        want = np.stack([_predict(np.asarray(w, np.float64), np.asarray(b, np.float64), x) for x in rows])
        if not close(got, want):
            whole = (np.asarray(xs, np.float64) - np.asarray(xs).mean()) @ np.asarray(w) + np.asarray(b)
            key = "applied_to_batch" if close(got, whole) else "mismatch"
            raise CheckFailed(key, _("batched_predict({inputs}) differs from predict on each row{why}").format(
                inputs=inputs, why=_(": predict was applied to the whole batch at once, so each example was "
                                     "centred on the batch's mean, not its own; vmap runs it one example at a time")
                if key == "applied_to_batch" else _(": yours gave {got} (shape {got_shape}), predict row by row "
                                                    "{want} (shape {want_shape})").format(
                    got=numbers(got), got_shape=np.shape(got), want=numbers(want), want_shape=want.shape)))

    agrees()
    w, b = _array(0, (5, 2)), _array(1, (2,))
    small, big = (batched.program_size(w, b, _array(2, (n, 5))) for n in (2, 6))
    if small != big:
        raise CheckFailed("python_loop", _(
            "batched_predict builds a bigger program for a bigger batch ({small} operations for 2 rows, {big} for "
            "6): a Python loop; jax.vmap gives one program for any batch").format(small=small, big=big))
    require_no_loop(batched, "batched_predict", w, b, _array(2, (6, 5)))
    _require_predict_mapped(batched, w, b, _array(2, (6, 5)))
    if "dot_general with batch dimensions" in batched.primitive_counts(w, b, _array(2, (6, 5))):
        raise CheckFailed("weights_mapped", _(
            "batched_predict gives the right numbers, but its program multiplies each example by its own copy of w "
            "(a batched product): w and b were copied per example and mapped; in_axes=(None, None, 0) shares them, "
            "one w for the whole batch, which is what in_axes None is for"))


def _require_predict_mapped(batched: Function, w: jax.Array, b: jax.Array, xs: jax.Array) -> None:
    """A `CheckFailed("predict_not_mapped")` unless `batched` calls the file's `predict` on one example at a time (under
    vmap its x is one row's shape): the same numbers from predict's math written again for a batch are not the
    exercise."""
    calls = batched.shapes_seen_by("predict", w, b, xs)
    if any(len(shapes) == 3 and shapes[2] == tuple(xs.shape[1:]) for shapes in calls):
        return
    how = (_("it calls predict with x of shape {shape}").format(shape=calls[0][-1]) if calls
           else _("it never calls predict, and computes the batch with predict's math written again"))
    raise CheckFailed("predict_not_mapped", _(
        "batched_predict gives the right numbers, but {how}: the exercise is jax.vmap(predict, in_axes=...), which "
        "keeps predict a function of one example of shape {one} and maps it over the rows, with no change to "
        "predict").format(how=how, one=tuple(xs.shape[1:])))


def _moving_average(xs: np.ndarray, decay: float) -> np.ndarray:
    m, out = 0.0, []
    for x in xs:
        m = decay * m + (1 - decay) * x
        out.append(m)
    return np.asarray(out)


def check_scan(ns: Learner) -> None:
    """Equal to the Python loop's averages, under jit with decay traced; one program for any length (a scan)."""
    moving_average = ns["moving_average"]

    # Lengths of 2 and more: with a single value the carry is never read again, so a wrong carry would pass.
    @examples(st.tuples(st.integers(0, 2**16), st.sampled_from([2, 4, 7]), st.sampled_from([0.5, 0.9])), n=4)
    def agrees(case):
        seed, length, decay = case
        xs = _array(seed, (length,))
        inputs = describe(xs=xs, decay=decay)
        got = attempt(moving_average.jit(), xs, decay, name="moving_average", inputs=inputs)
        x = np.asarray(xs, np.float64)
        want = _moving_average(x, decay)
        if not close(got, want):
            shifted = np.concatenate([[0.0], want[:-1]])
            carried_input = decay * np.concatenate([[0.0], x[:-1]]) + (1 - decay) * x  # step returned (x, m_new)
            swapped = _moving_average(x, 1 - decay)
            key = ("returns_final_only" if np.shape(got) == () else "history_shifted" if close(got, shifted)
                   else "carry_is_input" if close(got, carried_input)
                   else "decay_swapped" if close(got, swapped) else "mismatch")
            why = {"returns_final_only": _(" (only the last average: return every step's, the scan's outputs)"),
                   "history_shifted": _(" (each output is the previous step's average: output the new carry)"),
                   "carry_is_input": _(" (the carry handed to the next step is x_t, not the new average: the step "
                                       "returns (m_new, m_new), the average as the carry and as the output)"),
                   "decay_swapped": _(" (decay and 1 - decay are swapped)"), "mismatch": ""}[key]
            raise CheckFailed(key, _("moving_average({inputs}) = {got}, expected {want}{why}").format(
                inputs=inputs, got=numbers(got), want=numbers(want), why=why))

    agrees()
    small, big = (moving_average.program_size(_array(0, (n,)), 0.9) for n in (4, 12))
    if small != big:
        raise CheckFailed("python_loop", _(
            "moving_average builds a bigger program for a longer input ({small} operations for 4 values, {big} for "
            "12): the Python loop is unrolled when traced; jax.lax.scan compiles the step once").format(
            small=small, big=big))
    if "scan" not in moving_average.primitives(_array(0, (12,)), 0.9):
        raise CheckFailed("scan_missing", _(
            "moving_average gives the right numbers, but its program holds no jax.lax.scan: the exercise is the loop "
            "written as a scan, the step compiled once and run for every value, with the average as its carry"))
    # A sequence of vectors (an average of gradients, say): the carry is one x_t, not a number.
    xs = _array(5, (6, 3))
    inputs = describe(xs=xs, decay=0.9)
    try:
        got = attempt(moving_average.jit(), xs, 0.9, name="moving_average", inputs=inputs)
    except CheckFailed as failed:
        if (exc := raised_behind(failed, "TypeError")) is None:
            raise
        raise CheckFailed("vectors", _(
            "moving_average({inputs}): line {line} raised a TypeError ({error}); with xs of shape {shape} each x_t is "
            "a vector of {width}, so the average carried from step to step is one too: the carry starts as zeros with "
            "the shape of one x_t").format(inputs=inputs, line=exc.line or "?", error=exc.first_line(120),
                                           shape=xs.shape, width=xs.shape[1])) from exc
    if not close(got, want := _moving_average(np.asarray(xs, np.float64), 0.9)):
        raise CheckFailed("vectors", _("moving_average({inputs}) = {got}, expected {want}").format(
            inputs=inputs, got=numbers(got), want=numbers(want)))
    # At the scale the lesson uses: a thousand steps (a closed form of decay ** t loses its precision long before).
    xs = _array(8, (1000,))
    inputs = describe(xs=xs, decay=0.9)
    got = np.asarray(attempt(moving_average.jit(), xs, 0.9, name="moving_average", inputs=inputs), np.float64)
    want = _moving_average(np.asarray(xs, np.float64), 0.9)
    if got.shape != want.shape:
        raise CheckFailed("long_input", _("moving_average({inputs}) returned shape {got}; one average per value is "
                                          "{want}").format(inputs=inputs, got=got.shape, want=want.shape))
    if not close(got, want):  # NaN is never close to anything
        t = int(np.argmax(~np.isclose(got, want, rtol=1e-4, atol=1e-4)))
        raise CheckFailed("long_input", _(
            "moving_average({inputs}), 1000 steps: step {t} gives {got}, the loop {want}: right for short inputs "
            "only (a closed form in powers of decay loses its precision, or overflows, as t grows; a length written "
            "into the code?); carry the average from step to step with jax.lax.scan").format(
            inputs=inputs, t=t, got=numbers(got[t]), want=numbers(want[t])))


def check_cond(ns: Learner) -> None:
    """sqrt with the sign kept, under jit and vmap, and gradients without NaN on both sides."""
    signed_sqrt = ns["signed_sqrt"]
    jitted = signed_sqrt.jit()

    only_cond = _("jax.lax.cond (jnp.where would compute both branches, and the gradient of the one not taken is "
                  "NaN)")

    def at(x: float) -> float:
        return float(attempt(jitted, jnp.float32(x), name="signed_sqrt", inputs=f"x={x}", branch_fix=only_cond))

    # Small values on both sides of 0: a condition at any other threshold than 0 (x > 0.2, x >= 0.25) puts them
    # in the other branch, whose result is NaN or of the other sign.
    @example(0.1)
    @example(1e-8)
    @example(1e-30)
    @example(-1e-8)
    @examples(st.sampled_from([4.0, -9.0, 0.0, 2.25, -0.25, 100.0]), n=6)
    def agrees(x):
        got = at(x)
        want = np.sign(x) * np.sqrt(abs(x))
        # To float32's precision, tiny values too: sqrt(1e-30) is 1e-15, and an epsilon added "against NaN" is not.
        if not close(got, want, tol=1e-6):
            raise CheckFailed(*sqrt_mistake(x, got, want, at))

    agrees()
    # 0.25: between 0 and 1, where a condition on x >= 1 (not x >= 0) would take the wrong branch.
    half = jnp.asarray(4.0, jnp.bfloat16)
    require_dtype_kept(attempt(jitted, half, name="signed_sqrt", inputs="x=bfloat16(4.0)", branch_fix=only_cond), half,
                       "signed_sqrt", "x=bfloat16(4.0)")
    xs = jnp.asarray([4.0, -4.0, 0.25])
    got = attempt(signed_sqrt.vmap(), xs, name="jax.vmap(signed_sqrt)", inputs=describe(xs=xs), branch_fix=only_cond)
    if not close(got, np.asarray([2.0, -2.0, 0.5])):
        raise CheckFailed("mismatch", _("jax.vmap(signed_sqrt)([4, -4, 0.25]) = {got}, expected [2, -2, 0.5]").format(
            got=numbers(got)))
    for x in (4.0, -4.0):
        grad = float(attempt(signed_sqrt.grad(), jnp.float32(x), name="jax.grad(signed_sqrt)", inputs=f"x={x}"))
        if not np.isfinite(grad):
            raise CheckFailed("nan_gradient", _(
                "jax.grad(signed_sqrt)({x}) is {grad}: both branches were computed (jnp.where does that) and the "
                "one not taken is NaN here, which poisons the gradient; jax.lax.cond runs only the branch taken"
            ).format(x=x, grad=grad))
        if not close(grad, 0.25):
            raise CheckFailed("mismatch", _("jax.grad(signed_sqrt)({x}) = {grad}, expected 0.25").format(x=x, grad=grad))
    if "cond" not in signed_sqrt.primitives(jnp.float32(2.0)):
        raise CheckFailed("cond_missing", _(
            "signed_sqrt gives the right numbers, but its program holds no jax.lax.cond: the exercise is the branch "
            "written as a cond, which runs only the branch the value asks for (a formula such as sign(x) * "
            "sqrt(|x|) avoids the branch the exercise is about)"))


def sqrt_mistake(x: float, got: float, want: float, at: Callable[[float], float]) -> tuple[str, str]:
    """The key and message of a wrong `signed_sqrt(x)`: right further from 0 but wrong here is a condition that does
    not split at 0; a NaN on both sides is swapped branches, on one side that side's branch alone."""
    far = 4.0 if x > 0 else -4.0
    if x == 0 and not np.isfinite(got):
        return "zero_over_zero", _("signed_sqrt(0) = {got}, expected 0 (at 0 your formula divides 0 by 0, or takes "
                                   "a root's gradient where it is infinite: 0 / 0 is NaN; give 0 its own value)").format(
            got=got)
    if close(got, np.sqrt(abs(x)), tol=1e-6):
        key, why = "lost_sign", _(" (the sign is lost)")
    elif x != 0 and abs(x) < 1 and (not np.isfinite(got) or close(got, -want)) and close(at(far), np.sign(far) * 2.0):
        key, why = "condition_not_at_zero", _(" (signed_sqrt({far:g}) is right: {x:g} went to the other branch, so "
                                              "the condition must compare x with 0)").format(far=Code(far), x=Code(x))
    elif np.isfinite(got) and close(got, want):  # right to 1e-4, not to float32's precision: tiny values moved
        key, why = "tiny_values_off", _(" (right for large x, off for tiny ones: an epsilon added inside the root, "
                                        "\"against NaN\", moves them; jax.lax.cond takes no root of a negative number, "
                                        "so it needs none)")
    elif np.isfinite(got):
        key, why = "mismatch", ""
    elif not (np.isfinite(at(4.0)) or np.isfinite(at(-4.0))):
        key, why = "branches_swapped", _(" (the branches are swapped: each takes the square root of a negative number, "
                                         "which is NaN)")
    else:
        key, why = "branch_sqrt_of_negative", _(" (the branch for x < 0 takes the square root of a negative number, "
                                                "which is NaN: take it of -x there)") if x < 0 else _(
            " (the branch for x >= 0 takes the square root of a negative number, which is NaN: take it of x there)")
    return key, _("signed_sqrt({x}) = {got:.3g}, expected {want:.3g}{why}").format(x=x, got=got, want=want, why=why)


def check_split_keys(ns: Learner) -> None:
    """Shape (n, *x.shape); the key decides; every copy its own key, every entry its own draw; the parent key unused;
    standard normal noise (its whole distribution, not two moments)."""
    noisy = KeysLast(ns["noisy_copies"].jit(static_argnums=2))  # a key used twice is told last
    # Not key 0: a file that ignores its key for a global `PRNGKey(0)` would draw what key 0 draws, and be told it
    # used the key it was given.
    seed = 7
    # Two sizes an answer cannot assume; the second's 16,384 draws tell a normal's shape from another's.
    cases = ((jnp.arange(24.0).reshape(4, 6), 3), (jnp.linspace(-1.0, 1.0, 1024), 16))
    for x, n in cases:
        inputs = describe(key=key_text(seed), x=x, n=n)
        out = attempt(noisy, jax.random.key(seed), x, n, name="noisy_copies", inputs=inputs)
        if np.shape(out) != (n, *x.shape):
            raise CheckFailed("shape", _("noisy_copies({inputs}) returned shape {got}; expected {wanted}: n copies of "
                                         "x's shape").format(inputs=inputs, got=np.shape(out), wanted=(n, *x.shape)))
        require_finite(out, "noisy_copies", inputs)
        # The parent key's own draw is made here once, for the first case (a reference compiles a program per shape).
        parent = np.asarray(jax.random.normal(jax.random.key(seed), x.shape)) if x is cases[0][0] else None
        _check_every_draw_its_own(np.asarray(out, np.float64) - np.asarray(x, np.float64), parent, inputs)
    if not np.array_equal(np.asarray(attempt(noisy, jax.random.key(seed), x, n, name="noisy_copies", inputs=inputs)),
                          np.asarray(out)):
        raise CheckFailed("not_deterministic", _("noisy_copies({inputs}) twice gave other noise: draw it from the "
                                                 "key only").format(inputs=inputs))
    other = np.asarray(attempt(noisy, jax.random.key(seed + 1), x, n, name="noisy_copies", inputs=inputs))
    if np.array_equal(other, np.asarray(out)):
        raise CheckFailed("ignores_key", _("noisy_copies gives the same noise with {k0} and {k1}: the noise must "
                                           "come from the key you are given").format(k0=key_text(seed), k1=key_text(seed + 1)))
    _check_standard_normal(np.asarray(out, np.float64) - np.asarray(x, np.float64), inputs)
    noisy.raise_reuse(name="noisy_copies", inputs=inputs)


def _check_every_draw_its_own(noise: np.ndarray, parent: np.ndarray | None, inputs: str) -> None:
    """No two copies alike, no copy drawn with the key given (`parent`, that key's own draw, where given), no number
    drawn twice inside a copy."""
    clean = next((c for c, copy in enumerate(noise) if np.allclose(copy, 0.0)), None)
    if clean is not None:
        raise CheckFailed("copy_without_noise", _(
            "noisy_copies({inputs}): copy {c} is x itself, with no noise: each of the n copies gets its own noise, "
            "the first too").format(inputs=inputs, c=clean))
    for i in range(len(noise)):
        for j in range(i + 1, len(noise)):
            if np.allclose(noise[i], noise[j]):
                raise CheckFailed("key_reused", _(
                    "noisy_copies({inputs}): copies {i} and {j} have the same noise: one key was used for several "
                    "copies; split it, one key per copy").format(inputs=inputs, i=i, j=j))
    if parent is not None and any(np.allclose(row, parent, atol=1e-5) for row in noise):
        raise CheckFailed("parent_key_used", _(
            "noisy_copies({inputs}): a copy's noise is what the key you were given draws by itself: split that key "
            "into one key per copy (jax.random.split(key, n)) and draw each copy's noise with its own; the key you "
            "were given draws nothing").format(inputs=inputs))
    # A draw broadcast over rows or columns repeats each number (4 decimals: x + noise - x is not noise to the bit).
    repeated = next((c for c, copy in enumerate(noise) if np.unique(np.round(copy, 4)).size <= copy.size // 2), None)
    if repeated is not None:
        raise CheckFailed("noise_shared", _(
            "noisy_copies({inputs}): inside copy {c} the same noise repeats ({distinct} distinct values for {size} "
            "entries): one draw was broadcast over a row or a column; draw noise of x's whole shape, one number per "
            "entry").format(inputs=inputs, c=repeated, distinct=np.unique(np.round(noise[repeated], 4)).size,
                            size=noise[repeated].size))


def _check_standard_normal(noise: np.ndarray, inputs: str) -> None:
    """Noise of 16,384 draws: mean 0 and std 1 first (the commonest slips), then the distribution's whole shape, by
    the largest gap between its cumulative distribution and N(0, 1)'s (Kolmogorov-Smirnov)."""
    noise = noise.ravel()
    if not (abs(noise.mean()) < 0.05 and 0.95 < noise.std() < 1.05):  # each known to +-0.01 for a normal
        raise CheckFailed("not_standard_normal", _(
            "noisy_copies({inputs}): the noise has mean {mean:.2f} and std {std:.2f}; jax.random.normal gives mean 0 "
            "and std 1 (is x added to it, or a scale?)").format(inputs=inputs, mean=noise.mean(), std=noise.std()))
    z, count = np.sort(noise), noise.size
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    gap = max(float(np.max(np.arange(1, count + 1) / count - cdf)), float(np.max(cdf - np.arange(count) / count)))
    if gap > 2.7 / math.sqrt(count):  # a normal's draws pass this with probability 1 - 1e-6
        raise CheckFailed("not_normal", _(
            "noisy_copies({inputs}): the noise has mean 0 and std 1 but not a normal's shape (its cumulative "
            "distribution is {gap:.3f} away from N(0, 1)'s; a normal sample of this size stays within {bound:.3f}): "
            "draw it with jax.random.normal, not a uniform or another distribution rescaled").format(
            inputs=inputs, gap=gap, bound=2.7 / math.sqrt(count)))
    if np.max(np.abs(noise)) <= 3.0:  # a normal sample of this size holds about 44 draws beyond +-3 (none: p = e^-44)
        raise CheckFailed("no_tails", _(
            "noisy_copies({inputs}): none of the {count:,} draws lies beyond +-3, where a standard normal puts about "
            "{expected:.0f} of them: its tails were cut (jax.random.truncated_normal); draw with "
            "jax.random.normal").format(inputs=inputs, count=count, expected=0.0027 * count))
