"""Checks of the lesson's "Build it" steps: init_params, forward, loss_fn, train_step."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
from hypothesis import strategies as st

from jaxintro.exercises.checking import (CheckFailed, KeysLast, attempt, close, describe, examples, key_text,
                                         make_batch, make_params, numpy_tree, require_finite, unchanged)
from jaxintro.exercises.learner import Learner, LearnerRaised
from jaxintro.exercises.wire import type_name
from jaxintro.i18n import N_, _

# Few distinct small dimensions: each new shape compiles the learner's function once more.
sizes_st = st.lists(st.sampled_from([1, 3, 4]), min_size=2, max_size=4).map(tuple)
mlp_st = st.tuples(st.integers(0, 2**16), st.sampled_from([1, 4]), st.lists(st.sampled_from([2, 3, 5]), min_size=4,
                                                                              max_size=4))


def check_init_params(ns: Learner) -> None:
    """Shapes for any sizes; the key decides everything; one key per layer; He scale; zero biases; jittable."""
    init_params = KeysLast(ns["init_params"].jit(static_argnums=1))  # the sizes fix the shapes: static

    @examples(st.tuples(st.integers(0, 2**16), sizes_st), n=3)
    def shapes(case):
        _check_init_shapes(init_params, *case)

    shapes()
    _check_init_shapes(init_params, 0, (16,) * 6)  # five layers: an answer that assumes the lesson's three fails
    sizes = (16,) * 6  # five layers: an answer that assumes the lesson's three splits too few keys
    inputs = describe(key=key_text(0), sizes=sizes)
    a = attempt(init_params, jax.random.key(0), sizes, name="init_params", inputs=inputs)
    require_finite(a, "init_params", inputs)
    zero = next((name for name, layer in a.items() if not np.any(np.asarray(layer["w"]))), None)
    if zero:
        raise CheckFailed("zero_weights", _(
            "init_params({inputs}): {layer}['w'] is all zeros, so every unit computes the same and learns the same: "
            "is the scale 0? In Python 2 // fan_in is a floor division, 0 for fan_in > 2; 2 / fan_in is the "
            "division He init wants").format(inputs=inputs, layer=zero))
    again = attempt(init_params, jax.random.key(0), sizes, name="init_params", inputs=inputs)
    if not close(a, again, tol=0.0):
        raise CheckFailed("not_deterministic", _(
            "init_params({inputs}) gave other weights when called twice with the same key: draw every number "
            "from the key (jax.random), not from NumPy's or Python's global random state").format(inputs=inputs))
    # Under jit, NumPy's random numbers are drawn once, when tracing, and then never change with the key.
    other = attempt(init_params, jax.random.key(1), sizes, name="init_params", inputs=inputs)
    same = next((name for name in a if close(a[name]["w"], other[name]["w"], tol=0.0)), None)  # every layer
    if same:
        raise CheckFailed("ignores_key", _(
            "init_params gives the same {layer}['w'] for {k0} and {k1}: every layer's weights must come from the key "
            "you are given (split it; a key made inside the function, jax.random.key(0) or PRNGKey(0), is the same "
            "at every call)").format(layer=same, k0=key_text(0), k1=key_text(1)))
    _check_keys_split(a, inputs)
    wide = next((f"{name}['{k}']: {leaf.dtype}" for name, layer in a.items() for k, leaf in layer.items()
                 if np.dtype(leaf.dtype) != np.float32), None)
    if wide:
        raise CheckFailed("not_float32", _("init_params({inputs}) gave {dtype}; the lesson's parameters are float32 "
                                           "(is jax_enable_x64 on, or a dtype asked for?)").format(
            inputs=inputs, dtype=wide))
    for name, layer in a.items():
        if not np.all(np.asarray(layer["b"]) == 0):
            raise CheckFailed("bias_not_zero", _("init_params({inputs}): {layer}['b'] is not all zeros; the lesson "
                                                 "starts biases at 0").format(inputs=inputs, layer=name))
    _check_he_scale(init_params)
    init_params.raise_reuse(name="init_params", inputs=inputs)


def _check_init_shapes(init_params, seed: int, sizes: tuple[int, ...]) -> None:
    """One layer per pair of sizes, each `w` (in, out) and `b` (out,)."""
    params = attempt(init_params, jax.random.key(seed), sizes, name="init_params",
                     inputs=describe(key=key_text(seed), sizes=sizes))
    wanted = {f"layer{i + 1}": {"b": (b,), "w": (a, b)} for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))}
    got = jax.tree.map(lambda leaf: tuple(np.shape(leaf)), params) if isinstance(params, dict) else params
    if got != wanted:
        raise CheckFailed("shape", _("init_params({inputs}) gave {got}; expected {wanted}").format(
            inputs=describe(key=key_text(seed), sizes=sizes), got=got, wanted=wanted))


def _check_keys_split(params: dict, inputs: str) -> None:
    """No two layers drawn from one key, and the given key itself not used (it was split)."""
    ws = [np.asarray(params[f"layer{i}"]["w"]) for i in range(1, len(params) + 1)]
    for i in range(len(ws)):
        for j in range(i + 1, len(ws)):
            if np.allclose(ws[i] / ws[i].std(), ws[j] / ws[j].std(), atol=1e-5):
                raise CheckFailed("key_reused", _(
                    "init_params({inputs}): layer{i} and layer{j} have the same weights (up to scale): one key "
                    "was used twice; split the key, one new key per layer").format(inputs=inputs, i=i + 1, j=j + 1))
    raw = np.asarray(jax.random.normal(jax.random.key(0), ws[0].shape))
    if np.allclose(ws[0] / ws[0].std(), raw / raw.std(), atol=1e-5):
        raise CheckFailed("key_reused", _(
            "init_params({inputs}): layer1 is drawn with the key you were given, and that key is split too: "
            "a key is used once; draw every layer from a split key").format(inputs=inputs))


def _check_he_scale(init_params) -> None:
    """The weights' spread is sqrt(2 / fan_in), layer by layer (many numbers, so the estimate is tight)."""
    sizes = (400, 100, 50)  # 45,000 weights: their std is known to within 1%
    params = attempt(init_params, jax.random.key(3), sizes, name="init_params",
                     inputs=describe(key=key_text(3), sizes=sizes))
    for (name, layer), fan_in in zip(params.items(), sizes):
        w = np.asarray(layer["w"], np.float64)
        mean, std, want = float(np.mean(w)), float(np.std(w)), float(np.sqrt(2.0 / fan_in))
        # The distribution first: a uniform's kurtosis is 1.8, a normal's 3 (a normal cut at 2 std, as
        # jax.nn.initializers.he_normal draws it, 2.4); with 5,000 weights or more it is known to +-0.1. A uniform
        # has another spread too, which would otherwise be blamed on the scale.
        kurtosis = float(np.mean(((w - mean) / std) ** 4)) if std > 0 else math.nan
        if kurtosis < 2.1:
            raise CheckFailed("not_normal", _(
                "init_params with sizes={sizes}: {layer}['w'] has values that look uniform (kurtosis {kurtosis:.2f}; "
                "a normal's is 3, a uniform's 1.8; std {std:.4f}, He wants {want:.4f}): draw them with "
                "jax.random.normal, then scale by sqrt(2 / fan_in)").format(
                sizes=sizes, layer=name, kurtosis=kurtosis, std=std, want=want))
        if abs(mean) > 0.2 * want or not 0.9 * want < std < 1.1 * want:
            key = "missing_he_scale" if 0.8 < std < 1.2 else "wrong_scale"
            raise CheckFailed(key, _(
                "init_params with sizes={sizes}: {layer}['w'] has mean {mean:.3f} and std {std:.4f}; He init "
                "wants mean 0 and std sqrt(2 / fan_in) = sqrt(2 / {fan_in}) = {want:.4f}").format(
                sizes=sizes, layer=name, mean=mean, std=std, fan_in=fan_in, want=want))


def _reference_forward(params: dict, x, *, last_relu: bool = False, relu: bool = True, bias: bool = True,
                       string_order: bool = False) -> np.ndarray:
    """The lesson's forward (and its typical mistakes), in float64 NumPy."""
    params, h = numpy_tree(params), np.asarray(x, np.float64)
    # The layers by number; string_order is the mistake of walking them as jax.tree.leaves lists them.
    names = sorted(params) if string_order else sorted(params, key=lambda n: int(n.removeprefix("layer")))
    for k, name in enumerate(names):
        h = h @ params[name]["w"] + (params[name]["b"] if bias else 0.0)
        if relu and (k < len(names) - 1 or last_relu):
            h = np.maximum(h, 0.0)
    return h


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def diagnose_forward(got, params: dict, x) -> str:
    """The key of the known mistake `got` matches, else `mismatch`."""
    variants = {
        "relu_on_logits": _reference_forward(params, x, last_relu=True),
        "missing_relu": _reference_forward(params, x, relu=False),
        "missing_bias": _reference_forward(params, x, bias=False),
        "softmax_output": _softmax(_reference_forward(params, x)),
    }
    return next((key for key, value in variants.items() if close(got, value)), "mismatch")


FORWARD_MISTAKES = {
    "relu_on_logits": N_("there is a ReLU on the last layer: logits must be free to be negative"),
    "missing_relu": N_("there is no ReLU between the layers: without it three layers are one linear map"),
    "missing_bias": N_("a bias (b) is not added"),
    "softmax_output": N_("it returns probabilities (softmax); return the logits, the loss takes the softmax"),
    "mismatch": N_("the numbers differ from the lesson's forward"),
}


def check_forward(ns: Learner) -> None:
    """Equal to the lesson's forward on random shapes and values, also under jit; the params are not changed."""
    forward = ns["forward"]
    params, (x, _y) = make_params(0, (3, 4, 4, 2)), make_batch(0, 2, 3, 2)
    inputs = describe(params=params, x=x)
    # Once without jit (under jit an input cannot be changed in place, so a mutation would not show); the params
    # come back as the call left them in the learner's process, ours stay as they were:
    first, (after, _x) = attempt(forward.call_returning_args, params, x, name="forward", inputs=inputs)
    if not unchanged(params, after):
        raise CheckFailed("mutated_input", _("forward({inputs}) changed the params it was given; a pure "
                                             "function only reads its inputs").format(inputs=inputs))
    # Eagerly again, the same shapes with other values: a pure function's output follows its inputs (a result kept
    # from an earlier call, in a global or a cache, does not; under jit the Python runs once per shape and hides it).
    params, (x, _y) = make_params(1, (3, 4, 4, 2)), make_batch(1, 2, 3, 2)
    inputs = describe(params=params, x=x)
    got, want = attempt(forward, params, x, name="forward", inputs=inputs), _reference_forward(params, x)
    # The first call's answer, again (an answer of another shape, or None, is for the comparisons below to name).
    if np.shape(got) == want.shape and close(got, first) and not close(got, want):
        raise CheckFailed("not_pure", _(
            "forward({inputs}), called a second time with inputs of the same shapes, gave {got}, expected {want}: its "
            "output must follow its inputs, not a value kept from an earlier call (a global, a cache)").format(
            inputs=inputs, got=_row(got), want=_row(want)))

    @examples(mlp_st, n=4)
    def agrees(case):
        seed, batch, sizes = case
        params, (x, _y) = make_params(seed, tuple(sizes)), make_batch(seed, batch, sizes[0], sizes[-1])
        inputs = describe(params=params, x=x)
        got = attempt(forward.jit(), params, x, name="forward", inputs=inputs)
        want = _reference_forward(params, x)
        if not close(got, want):
            key = diagnose_forward(got, params, x)
            # Named on a case where no two mistakes give the same numbers (a small one can: all its hidden units
            # dead, the logits are 0 without biases and 0 after a last ReLU alike).
            wide, (wide_x, _y) = make_params(99, (3, 8, 8, 4)), make_batch(99, 4, 3, 4)
            wide_got = attempt(forward.jit(), wide, wide_x, name="forward", inputs=describe(params=wide, x=wide_x))
            if not close(wide_got, _reference_forward(wide, wide_x)):
                key = diagnose_forward(wide_got, wide, wide_x)
            raise CheckFailed(key, _("forward({inputs}): {what} (first row: yours {got}, expected {want})").format(
                inputs=inputs, what=_(FORWARD_MISTAKES[key]), got=_row(got), want=_row(want)))

    agrees()
    # Values in the hundreds, as a trained model's can be: a forward that clips or squashes the logits (a last layer's
    # weights x 300), or caps a hidden unit (the first layer's x 100 too: relu6), shows there.
    params, (x, _y) = make_params(5, (3, 4, 4, 2)), make_batch(5, 3, 3, 2)
    for layer, scale, key, note, why in LARGE_VALUES:
        params[layer]["w"] = params[layer]["w"] * scale
        inputs = describe(params=params, x=x) + _(note)
        got = attempt(forward.jit(), params, x, name="forward", inputs=inputs)
        if not close(got, want := _reference_forward(params, x)):
            raise CheckFailed(key, _("forward({inputs}): yours {got}, expected {want}: {why}").format(
                inputs=inputs, got=_row(got), want=_row(want), why=_(why)))


# Each case scales one more layer's weights of the same params: (layer, scale, key, what the inputs add, why).
LARGE_VALUES = (
    ("layer3", 300, "large_logits", N_(" (last layer's weights x 300)"),
     N_("the logits must stay what the last layer computes, however large (the loss's log_softmax handles them; "
        "clipping or squashing them changes the model)")),
    ("layer1", 100, "large_activations", N_(" (first layer's weights x 100, last layer's x 300)"),
     N_("a hidden unit's ReLU, max(0, z), keeps every positive value however large (jax.nn.relu6 or a clip caps it "
        "at 6, another function than the lesson's)")),
)


def _row(value) -> str:
    try:
        return np.array2string(np.asarray(value).reshape(-1)[:4], precision=3) + ("..." if np.size(value) > 4 else "")
    except (TypeError, ValueError):
        return repr(value)[:60]


def _reference_loss(params: dict, x, y) -> float:
    """The lesson's mean cross-entropy, in float64 NumPy."""
    logits = _reference_forward(params, x)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs = log_probs - np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(y)), np.asarray(y)]))


def check_loss_fn(ns: Learner) -> None:
    """A scalar equal to the lesson's loss on random inputs, under jit too, and finite for huge logits."""
    loss_fn = ns["loss_fn"]

    @examples(mlp_st, n=4)
    def agrees(case):
        seed, batch, sizes = case
        params, (x, y) = make_params(seed, tuple(sizes)), make_batch(seed, batch + 1, sizes[0], sizes[-1])
        inputs = describe(params=params, x=x, y=y)
        try:
            got = attempt(loss_fn.jit(), params, x, y, name="loss_fn", inputs=inputs)
        except CheckFailed:
            _refuse_one_hot(loss_fn, params, x, y, inputs)
            raise
        if np.shape(got) != ():
            raise CheckFailed("not_scalar", _("loss_fn({inputs}) returned shape {shape}; a loss is one number "
                                              "(a scalar): the mean over the batch").format(
                inputs=inputs, shape=np.shape(got)))
        want = _reference_loss(params, x, y)
        if not close(got, want):
            _refuse_one_hot(loss_fn, params, x, y, inputs)
            key = _diagnose_loss(got, params, x, y)
            why = _(_LOSS_WHY[key]) if key in _LOSS_WHY else ""
            raise CheckFailed(key, _("loss_fn({inputs}) = {got:.5f}; the mean cross-entropy is {want:.5f}{why}").format(
                inputs=inputs, got=float(got), want=float(want), why=why))

    agrees()
    params, (x, y) = make_params(7, (4, 8, 8, 3)), make_batch(7, 4, 4, 3)
    # The gradient too: the training step follows it, and a value computed right can hide part of the loss from it.
    grads, want = attempt(loss_fn.grad().jit(), params, x, y, name="jax.grad(loss_fn)",
                          inputs=describe(params=params, x=x, y=y)), batch_grads(params, x, y)
    if not close(grads, want):
        where = next((jax.tree_util.keystr(path) for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(grads),
                                                                         jax.tree.leaves(want)) if not close(g, w)), "")
        raise CheckFailed("wrong_gradient", _(
            "loss_fn's values are right, but jax.grad(loss_fn) is not the cross-entropy's gradient (first at "
            "{where}): a stop_gradient, or a value computed outside JAX, hides part of the loss from the gradient; "
            "training follows the gradient, not the value").format(where=where))
    params["layer3"]["w"] = params["layer3"]["w"] * 1e4  # logits in the tens of thousands
    got = attempt(loss_fn.jit(), params, x, y, name="loss_fn", inputs=describe(params=params, x=x, y=y))
    finite = np.isfinite(float(got))
    if finite and not close(got, want := _reference_loss(params, x, y)):
        raise CheckFailed("large_logits_wrong", _(
            "loss_fn gives {got:.1f} when the logits are large (last layer's weights x 10000); the mean cross-entropy "
            "is {want:.1f}: a log-probability clipped, or a probability floored, to keep it finite changes the loss "
            "of exactly the examples the model gets most wrong; jax.nn.log_softmax is finite without it").format(
            got=float(got), want=want))
    if not finite:
        raise CheckFailed("unstable_log_softmax", _(
            "loss_fn gives {got} when the logits are large (last layer's weights x 10000): in float32, exp of a "
            "logit above about 88 overflows to inf, and a probability far below the largest rounds to 0, whose log is "
            "-inf; jax.nn.log_softmax computes the log-probabilities without either (it subtracts the largest logit "
            "first)").format(got=got))


def _refuse_one_hot(loss_fn, params, x, y, inputs: str) -> None:
    """A CheckFailed when `loss_fn` is right once its labels are one-hot: it was written for one-hot labels."""
    classes = np.shape(params[f"layer{len(params)}"]["w"])[1]
    try:
        got = loss_fn.jit()(params, x, jax.nn.one_hot(y, classes))
    except LearnerRaised:  # whatever it raised: not written for one-hot either
        return
    if close(got, _reference_loss(params, x, y)):
        raise CheckFailed("one_hot_labels", _(
            "loss_fn({inputs}) is written for one-hot labels (given jax.nn.one_hot(y) it is right), but y holds "
            "integer classes, shape (batch,): each row's loss is the log-probability at the column its label names; "
            "pick that one entry per row (the lesson's section on the loss shows how) instead of multiplying by a "
            "one-hot matrix").format(inputs=inputs))


def _diagnose_loss(got, params, x, y) -> str:
    picked = _softmax(_reference_forward(params, x))[np.arange(len(y)), np.asarray(y)]
    loss = _reference_loss(params, x, y)
    variants = {
        "softmax_not_log_softmax": (-np.mean(picked), np.mean(picked), 1 - np.mean(picked)),
        "sum_not_mean": (loss * len(y),),
        "wrong_sign": (-loss,),
    }
    return next((k for k, vs in variants.items() if any(close(got, v) for v in vs)), "mismatch")


_LOSS_WHY = {
    "softmax_not_log_softmax": N_(": it averages probabilities (softmax), not their logs (log_softmax)"),
    "sum_not_mean": N_(": it sums over the batch; take the mean"),
    "wrong_sign": N_(": the sign is flipped; the loss is minus the mean log-probability"),
}


def example_grads(params: dict, x, y) -> dict:
    """Each example's gradient of the lesson's loss, by hand in float64 NumPy (backpropagation through the three
    layers, one row per example: what jax.grad of one example's loss gives, vmapped or looped)."""
    p = numpy_tree(params)
    x = np.asarray(x, np.float64)
    z1 = x @ p["layer1"]["w"] + p["layer1"]["b"]
    h1 = np.maximum(z1, 0.0)
    z2 = h1 @ p["layer2"]["w"] + p["layer2"]["b"]
    h2 = np.maximum(z2, 0.0)
    logits = h2 @ p["layer3"]["w"] + p["layer3"]["b"]
    d3 = _softmax(logits) - np.eye(logits.shape[1])[np.asarray(y)]  # d loss / d logits, row by row
    d2 = (d3 @ p["layer3"]["w"].T) * (z2 > 0)  # ReLU's gradient is 0 at 0, as JAX's
    d1 = (d2 @ p["layer2"]["w"].T) * (z1 > 0)
    outer = lambda a, d: np.einsum("ni,nj->nij", a, d)  # noqa: E731 (each example's weight gradient)
    return {"layer1": {"b": d1, "w": outer(x, d1)}, "layer2": {"b": d2, "w": outer(h1, d2)},
            "layer3": {"b": d3, "w": outer(h2, d3)}}


# The file's given optimizer, optax.adam(1e-3): the step is checked against Adam computed here, in NumPy, never in the
# process that runs the file (whose code could change a reference made there).
LEARNING_RATE, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8


def batch_grads(params: dict, x, y) -> dict:
    """The gradient of the lesson's mean loss over the batch (float64 NumPy): the mean of the examples' gradients."""
    return jax.tree.map(lambda g: g.mean(axis=0), example_grads(params, x, y))


def adam_state(count: int, mu: dict, nu: dict) -> tuple:
    """An `optax.adam` state holding `count`, `mu` and `nu`, as the file's optimizer makes and reads it."""
    fresh = optax.adam(LEARNING_RATE).init(mu)
    as32 = lambda tree: jax.tree.map(lambda v: np.asarray(v, np.float32), tree)  # noqa: E731
    return (fresh[0]._replace(count=np.asarray(count, np.int32), mu=as32(mu), nu=as32(nu)), *fresh[1:])


def adam_step(params: dict, state: tuple, grads: dict) -> tuple[dict, tuple]:
    """One `optax.adam(1e-3)` step in NumPy: (new params, new state)."""
    count = int(state[0].count) + 1
    mu = jax.tree.map(lambda m, g: B1 * np.asarray(m, np.float64) + (1 - B1) * g, dict(state[0].mu), grads)
    nu = jax.tree.map(lambda v, g: B2 * np.asarray(v, np.float64) + (1 - B2) * g ** 2, dict(state[0].nu), grads)
    new = jax.tree.map(lambda p, m, v: np.asarray(p, np.float64) - LEARNING_RATE * (m / (1 - B1 ** count)) / (
        np.sqrt(v / (1 - B2 ** count)) + EPS), dict(params), mu, nu)
    return new, adam_state(count, mu, nu)


def check_train_step(ns: Learner) -> None:
    """Jitted; the loss before the step; new params and optimizer state equal value_and_grad + the optimizer's."""
    train_step = ns["train_step"]
    if not train_step.is_jitted():
        raise CheckFailed("not_jitted", _("train_step is not compiled: put @jax.jit above it (the whole step, "
                                          "gradient and update, becomes one XLA program)"))

    @examples(mlp_st, n=2)
    def agrees(case):
        seed, batch, sizes = case
        # Two examples or more (a batch of one hides a mean taken wrong), and a state that has seen a step: with a
        # fresh one, a step that restarts the optimizer would look right.
        params, (x, y) = make_params(seed, tuple(sizes)), make_batch(seed, batch + 1, sizes[0], sizes[-1])
        inputs = describe(params=params, x=x, y=y)
        zeros = jax.tree.map(np.zeros_like, numpy_tree(params))
        fresh = adam_state(0, zeros, zeros)
        _stepped, state = adam_step(params, fresh, batch_grads(params, *make_batch(seed + 1, batch + 1, sizes[0],
                                                                                      sizes[-1])))
        out = attempt(train_step, params, state, x, y, name="train_step", inputs=inputs)
        if not (isinstance(out, tuple) and len(out) == 3):
            raise CheckFailed("returns", _("train_step must return (params, opt_state, loss); it returned "
                                           "{what}").format(what=type_name(out)))
        if _is_params(out[1], params) and not _is_params(out[0], params):
            raise CheckFailed("returns_out_of_order", _(
                "train_step({inputs}) returned the params in second place: it returns (params, opt_state, loss), in "
                "that order, the order the training loop unpacks").format(inputs=inputs))
        grads = batch_grads(params, x, y)
        (want_params, want_state), want_loss = adam_step(params, state, grads), _reference_loss(params, x, y)
        require_finite(out[2], "train_step", inputs)
        if not close(out[2], want_loss):
            raise CheckFailed("loss_after_step", _("train_step({inputs}) returned loss {got:.5f}; the loss at the "
                                                   "params it was given is {want:.5f}").format(
                inputs=inputs, got=float(np.asarray(out[2])), want=float(want_loss)))
        if not close(out[0], want_params, tol=1e-5):
            rates = (1e-3, 1e-2, 1e-1, 1.0)
            sgd = [jax.tree.map(lambda p, g: p - lr * g, params, grads) for lr in rates]
            # Up the gradient: p - updates (Optax's updates already point down), or p + lr * g.
            uphill = [jax.tree.map(lambda p, q: 2 * p - q, params, want_params)]
            uphill += [jax.tree.map(lambda p, g: p + lr * g, params, grads) for lr in rates]
            key = ("params_not_updated" if close(out[0], params, tol=0.0)
                   else "opt_state_restarted" if close(out[0], adam_step(params, fresh, grads)[0], tol=1e-5)
                   else "moved_up_the_gradient" if any(close(out[0], step, tol=1e-5) for step in uphill)
                   else "optimizer_not_used" if any(close(out[0], step) for step in sgd)
                   else "mismatch")
            raise CheckFailed(key, _("train_step({inputs}): the new params are not what optimizer.update and "
                                     "optax.apply_updates give from the gradient of loss_fn{why}").format(
                inputs=inputs, why={"params_not_updated": _(" (they did not change)"),
                                    "moved_up_the_gradient": _(
                                        " (they moved up the gradient, so the loss grows: optax.apply_updates adds "
                                        "the updates, which already point downhill)"),
                                    "optimizer_not_used": _(" (a plain p - lr * g step: use optimizer.update)"),
                                    "opt_state_restarted": _(
                                        " (they are a first step's: the step ignored the opt_state it was given, "
                                        "which holds Adam's moments and step count; update with that state, "
                                        "never a new optimizer.init)"),
                                    "mismatch": ""}[key]))
        # Leaf by leaf: a state crosses from the file's process as records of optax's names, not optax's classes.
        if not close(jax.tree.leaves(out[1]), jax.tree.leaves(want_state), tol=1e-5):
            raise CheckFailed("opt_state_not_updated", _(
                "train_step({inputs}): the returned opt_state is not the one optimizer.update returned: return "
                "the new opt_state (Adam's moments and step count live there)").format(inputs=inputs))

    agrees()
    _require_one_pass(ns)


def _is_params(value: object, params: dict) -> bool:
    """Whether `value` is laid out as the params are (a dict of the same layers), as an answer's part can be told."""
    return isinstance(value, dict) and set(value) == set(params)


def _require_one_pass(ns: Learner) -> None:
    """A `CheckFailed("forward_twice")` where the step's program holds more matrix products than `value_and_grad` of
    loss_fn: the forward pass computed again for the loss (`jax.grad`, then `loss_fn`), which the statement's one
    pass gives with the gradient."""
    params, (x, y) = make_params(0, (5, 4, 4, 3)), make_batch(0, 4, 5, 3)  # the given loss_fn's three layers
    zeros = jax.tree.map(np.zeros_like, numpy_tree(params))
    step = ns["train_step"].primitive_counts(params, adam_state(0, zeros, zeros), x, y).get("dot_general", 0)
    one_pass = ns.helper("loss_and_grad").primitive_counts(params, x, y).get("dot_general", 0)
    if step > one_pass:
        raise CheckFailed("forward_twice", _(
            "train_step's program holds {step} matrix products where jax.value_and_grad(loss_fn) needs {one_pass}: "
            "the forward pass runs twice (jax.grad, then loss_fn again for the loss); jax.value_and_grad(loss_fn) "
            "gives the loss and the gradient from one pass").format(step=step, one_pass=one_pass))
