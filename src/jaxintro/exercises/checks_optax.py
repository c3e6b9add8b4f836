"""Checks of the lesson's exercise 5 (exercise 15): gradient clipping in an Optax chain, and the curve of gradient
norms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from hypothesis import strategies as st

from jaxintro.exercises.checking import (CheckFailed, attempt, close, describe, examples, numbers, require_finite,
                                         unchanged)
from jaxintro.exercises.learner import Function, Learner
from jaxintro.exercises.probe import build_optimizer
from jaxintro.exercises.wire import Prop, type_name
from jaxintro.i18n import _

def _tree_st():
    """Small pytrees of gradients: a dict of arrays of a few shapes (NumPy-drawn)."""
    shapes = st.lists(st.sampled_from([(3,), (2, 2), (4, 1)]), min_size=1, max_size=3)
    return st.tuples(st.integers(0, 2**16), shapes)


def _grads(seed: int, shapes, scale: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    return {f"g{i}": jnp.asarray(scale * (i + 1) * rng.normal(size=s), jnp.float32) for i, s in enumerate(shapes)}


def check_clipping(ns: Learner) -> None:
    """global_norm over all leaves; clipped = clip then the optimizer, keeping the direction; the curve is raw norms."""
    global_norm, clipped, curve = ns["global_norm"], ns["clipped"], ns["grad_norm_curve"]

    @examples(_tree_st(), n=4)
    def norms(case):
        grads = _grads(*case)
        got = attempt(global_norm.jit(), grads, name="global_norm", inputs=describe(grads=grads))
        leaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
        want = np.sqrt(sum(np.sum(g ** 2) for g in leaves))
        if not close(got, want):
            key = ("norm_not_global" if close(got, sum(np.linalg.norm(g) for g in leaves))
                   else "norm_squared" if close(got, want ** 2) else "mismatch")
            raise CheckFailed(key, _("global_norm({inputs}) = {got:.4f}; the norm of all the leaves together is "
                                     "{want:.4f}").format(inputs=describe(grads=grads), got=float(np.asarray(got)),
                                                          want=want))

    norms()
    _check_clipped(clipped, ns.helper("first_updates"))
    _check_curve(curve)


def _optimizer_prop(*parts: tuple) -> Prop:
    """An Optax optimizer for the learner's code, built in its process: ("sgd", 0.05), or parts chained in order
    (`probe.build_optimizer` builds the same one here, for a reference)."""
    return Prop("optax", {"parts": [[name, list(args)] for name, *args in parts]})


def _check_clipped(clipped: Function, first_updates: Function) -> None:
    """`clipped(optimizer, max_norm)`'s first updates, from a fresh state, compared with the reference's (SGD after
    clip_by_global_norm, in NumPy) for gradients of norm far above and far below `max_norm`, at two settings."""
    grads = _grads(1, [(3,), (2, 2)], scale=10.0)  # global norm about 40, its leaves' norms far apart
    small = _grads(2, [(3,)], scale=0.05)  # global norm below any max_norm used
    norm = float(optax.tree.norm(grads))
    for lr, max_norm in ((1.0, 1.0), (0.5, 2.0)):
        inputs = describe(optimizer=f"optax.sgd({lr})", max_norm=max_norm)
        tx = attempt(clipped, _optimizer_prop(("sgd", lr)), max_norm, name="clipped", inputs=inputs)
        got_small = attempt(first_updates, tx, small, name="clipped", inputs=inputs)
        require_finite(got_small, "clipped", inputs)
        if not close(got_small, jax.tree.map(lambda g: -lr * np.asarray(g, np.float64), small)):
            key = "clipped_small_grads" if close(got_small, jax.tree.map(lambda g: -np.asarray(g), small)) and lr == 1 \
                else "optimizer_ignored"
            raise CheckFailed(key, _(
                "clipped({inputs}) on gradients of norm {small:.2f}, below max_norm: the update is not the optimizer's "
                "{why}").format(inputs=inputs, small=float(optax.tree.norm(small)), why=_(
                    "(clipping only shrinks the big ones)") if key == "clipped_small_grads" else _(
                    "(-{lr:g} x the gradient): use the optimizer clipped() is given, chained after the clip, not one "
                    "built inside").format(lr=lr)))
        updates = attempt(first_updates, tx, grads, name="clipped", inputs=inputs)
        require_finite(updates, "clipped", inputs)
        want = jax.tree.map(lambda g: -lr * np.asarray(g, np.float64) * min(1.0, max_norm / norm), grads)
        if not close(updates, want):
            raise CheckFailed(*_clip_mistake(updates, grads, lr, max_norm, inputs))


def _clip_mistake(updates, grads, lr: float, max_norm: float, inputs: str) -> tuple[str, str]:
    """The key and message of clipped updates that differ from the reference's (all of them finite)."""
    norm, got = float(optax.tree.norm(grads)), float(optax.tree.norm(updates))
    said = _("clipped({inputs}) on gradients of global norm {norm:.1f}: the update's norm is {got:.3f}, expected "
             "{lr:g} x {max_norm:g} = {want:.3f}").format(inputs=inputs, norm=norm, got=got, lr=lr, max_norm=max_norm,
                                                         want=lr * max_norm)
    elementwise = jax.tree.map(lambda g: -lr * np.clip(np.asarray(g, np.float64), -max_norm, max_norm), grads)
    if close(updates, elementwise):
        return "clipped_elementwise", said + _(
            ": every entry was clipped to [-max_norm, max_norm] on its own (optax.clip), so the update points "
            "elsewhere; optax.clip_by_global_norm(max_norm) scales the whole gradient by one factor")
    if all(float(jnp.linalg.norm(u)) <= lr * max_norm * (1 + 1e-4) for u in jax.tree.leaves(updates)) \
            and got > lr * max_norm * (1 + 1e-4):
        return "clipped_per_leaf", said + _(
            ": every leaf was clipped to the norm on its own; clip_by_global_norm scales all the leaves by one factor, "
            "keeping the direction")
    if abs(got - lr * norm) < 1e-3 * lr * norm:
        return "not_clipped", said + _(": nothing was clipped")
    if abs(got - min(lr * norm, max_norm)) < 1e-3:
        return "clip_after_optimizer", said + _(
            " (the clip comes after the optimizer: in optax.chain the clip goes first)")
    flat_g = np.concatenate([np.ravel(g) for g in jax.tree.leaves(grads)])
    flat_u = np.concatenate([np.ravel(u) for u in jax.tree.leaves(updates)])
    cosine = -float(flat_g @ flat_u / (np.linalg.norm(flat_g) * np.linalg.norm(flat_u) + 1e-12))
    if cosine < 0.999:
        return "clipped_per_leaf", said + _(
            " and it no longer points where the gradient did (cosine {cosine:.3f}): each leaf was changed alone; "
            "clip_by_global_norm scales all of them by one factor").format(cosine=cosine)
    return "max_norm_ignored", said + _(" (is max_norm passed on?)")


def _check_curve(curve: Function) -> None:
    """The curve for three optimizers, each given to the learner's code as a prop and built here for the reference."""
    rng = np.random.default_rng(5)
    params = {"w": jnp.asarray(rng.normal(size=(4, 1)), jnp.float32), "b": jnp.zeros(1)}
    batches = [(jnp.asarray(rng.normal(size=(8, 4)) * 3, jnp.float32), jnp.asarray(rng.normal(size=(8, 1)) * 5,
                                                                                      jnp.float32))
               for _ in range(4)]
    # Three optimizers: the curve follows the one it is given (a clip at 5.0 is not the default 1.0), Adam's state,
    # unlike SGD's, must be carried along, and AdamW's update needs the params.
    for parts in ((("clip_by_global_norm", 5.0), ("sgd", 0.05)), (("clip_by_global_norm", 0.5), ("adam", 0.1)),
                  (("clip_by_global_norm", 0.5), ("adamw", 0.1))):
        label = " + ".join(f"{name}({value})" for name, value in parts)  # clip_by_global_norm(5.0) + sgd(0.05)
        _check_curve_with(curve, params, batches, _optimizer_prop(*parts), describe(
            params=_("w (4, 1), b (1,)"), batches=_("4 batches"), optimizer=label))


def _check_curve_with(curve: Function, params: dict, batches: list, prop: Prop, inputs: str) -> None:
    """One curve: the raw gradient norms of the steps the optimizer `prop` takes from `params` over `batches`."""
    # Without jit, which hides a mutation; the params come back as the call left them there, ours stay as they were.
    returned, (after, *_rest) = attempt(curve.call_returning_args, params, batches, prop, name="grad_norm_curve",
                                        inputs=inputs)
    if not unchanged(params, after):
        raise CheckFailed("mutated_input", _(
            "grad_norm_curve({inputs}) changed the params it was given: optax.apply_updates returns new params; "
            "rebind the name (params = ...), never write into the dict you were given").format(inputs=inputs))
    if not hasattr(returned, "shape"):
        raise CheckFailed("curve_not_array", _(
            "grad_norm_curve({inputs}) returned a {kind}, not an array: jnp.stack the norms into one array of "
            "shape (steps,), ready to plot and to compare").format(
            inputs=inputs, kind=type_name(returned)))
    got = np.asarray(returned, np.float64)
    tx = build_optimizer(prop.spec["parts"])
    want, moved, state, p = [], [], tx.init(params), params
    loss = lambda q, x, y: jnp.mean((x @ q["w"] + q["b"] - y) ** 2)  # noqa: E731 (the given loss_fn)
    for x, y in batches:
        g = jax.grad(loss)(p, x, y)
        want.append(float(optax.tree.norm(g)))
        updates, state = tx.update(g, state, p)
        moved.append(float(optax.tree.norm(updates)))  # what a curve of the updates' norms would read
        p = optax.apply_updates(p, updates)
    if got.shape != (len(batches),):
        raise CheckFailed("curve_length", _("grad_norm_curve({inputs}) returned shape {got}: one norm per batch "
                                            "is ({n},)").format(inputs=inputs, got=got.shape, n=len(batches)))
    if not np.allclose(got, want, rtol=1e-3):
        key = ("norm_of_updates" if np.allclose(got, moved, rtol=1e-3)
               else "norm_after_clipping" if np.all(got <= 1.0 + 1e-4) else "mismatch")
        why = {"norm_of_updates": _(" (yours are the norms of the updates the optimizer returned, after clipping "
                                    "and the learning rate: measure the gradients jax.grad gives)"),
               "norm_after_clipping": _(" (yours never exceed 1.0: measured after clipping?)"), "mismatch": ""}[key]
        raise CheckFailed(key, _("grad_norm_curve({inputs}) = {got}; the gradients' norms before clipping are "
                                 "{want}{why}").format(inputs=inputs, got=numbers(got), want=numbers(want), why=why))

