"""Checks of the lesson's exercises 1 to 4: dropout, per-example gradients, any depth, jit timing (its exercise 5 is
`checks_optax`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example
from hypothesis import strategies as st

from jaxintro.exercises.checking import (CheckFailed, KeysLast, attempt, close, describe, examples, key_text,
                                         make_batch, make_params, numbers, raised_behind, require_finite,
                                         require_no_loop)
from jaxintro.exercises.checks_build import FORWARD_MISTAKES, _reference_forward, diagnose_forward, example_grads
from jaxintro.exercises.learner import Function, Learner, LearnerRaised
from jaxintro.exercises.wire import Prop
from jaxintro.i18n import Code, _, format_number, list_separator

EAGER_S = 0.02  # exercise 14: what each call of its test function costs when run without jit
SPREAD = (0.1, 0.3, 2.6)  # exercise 14: the timed calls' costs, times work_s (mean 1, median 0.3)
RATE, WIDTH = 0.2, 1024  # with 1024 units a kept fraction is known to +-0.015: 0.64 and 0.8 never mix up


def check_dropout(ns: Learner) -> None:
    """No key: the plain forward. A key: same key same masks, other key other masks, one mask per layer, scaled."""
    forward = ns["forward"]
    params, (x, _y) = make_params(0, (3, 5, 4, 2)), make_batch(0, 2, 3, 2)
    got = attempt(forward.jit(), params, x, name="forward", inputs=describe(params=params, x=x))
    if not close(got, _reference_forward(params, x)):
        raise CheckFailed("dropout_without_key", _(
            "forward({inputs}) without a key differs from the plain forward: without a key (at evaluation) there "
            "is no dropout").format(inputs=describe(params=params, x=x)))
    # A probe: identity layers on inputs of ones, so the logits are the product of both layers' masks, scaled.
    eye = jnp.eye(WIDTH)
    probe = {name: {"w": eye, "b": jnp.zeros(WIDTH)} for name in ("layer1", "layer2", "layer3")}
    ones = jnp.ones((2, WIDTH))
    # Fixed as a closure fixes them: constants under jit. A key used twice is told last, after what the masks show.
    run = KeysLast(forward.partial(probe, ones, rate=RATE).jit())
    inputs = describe(x=ones, rate=RATE)
    a, again, other = (np.asarray(attempt(run, key=jax.random.key(s), name="forward",
                                          inputs=inputs + ", key=" + key_text(s))) for s in (0, 0, 1))
    require_finite(a, "forward", inputs + ", key=" + key_text(0))
    # And eagerly, where the Python runs at every call (under jit it runs once, so a global read there is a constant).
    eager = forward.partial(probe, ones, rate=RATE).keys_unchecked()
    first, second = (np.asarray(attempt(eager, key=jax.random.key(0), name="forward",
                                        inputs=inputs + ", key=" + key_text(0))) for _ in range(2))
    if not (np.array_equal(a, again) and np.array_equal(first, second)):
        raise CheckFailed("not_deterministic", _("forward({inputs}) twice with {key} gave other masks: draw them "
                                                 "from the key only").format(inputs=inputs, key=key_text(0)))
    if np.array_equal(a, other):
        raise CheckFailed("ignores_key", _("with key {k0} and key {k1} your dropout masks are identical: are the "
                                           "masks drawn from the key you are given?").format(k0=key_text(0),
                                                                                         k1=key_text(1)))
    if np.array_equal(a[0], a[1]):
        raise CheckFailed("mask_shared_across_batch", _(
            "forward({inputs}): both examples of the batch got the same mask: draw a mask of h.shape, "
            "(batch, units), not (units,)").format(inputs=inputs))
    _check_masks(a, inputs)
    # A mask drawn with the key forward was given (bernoulli's, or uniform's either way) keeps every unit the
    # output kept; one drawn from a split key agrees with it on 80% of them only.
    uniform = np.asarray(jax.random.uniform(jax.random.key(0), a.shape))
    if any(np.all(parent[a != 0]) for parent in (uniform < 1 - RATE, uniform > RATE)):
        raise CheckFailed("parent_key_used", _(
            "forward({inputs}): a layer's mask is what the key forward was given draws by itself: split that key "
            "into one key per layer (jax.random.split(key, 2)) and draw each mask with its own; the key you were "
            "given draws nothing").format(inputs=inputs + ", key=" + key_text(0)))
    half = describe(x=ones, rate=0.5) + ", key=" + key_text(0)
    _check_masks(np.asarray(attempt(forward.partial(probe, ones, rate=0.5).jit().keys_unchecked(),
                                    key=jax.random.key(0), name="forward", inputs=half)), half, 0.5)
    _check_placement(forward)
    run.raise_reuse(name="forward", inputs=inputs + ", key=" + key_text(0))


def _check_placement(forward: Function) -> None:
    """Where the masks go, which the identity probe cannot tell: zero inputs and a bias of 1 in layer 1 (a mask
    must multiply a layer's output, after its bias and ReLU, not its input or its product alone), layers of three
    widths (a mask of another layer's shape does not fit), and a bias of 1 on the logits (which take no mask)."""
    probe = {"layer1": {"w": jnp.zeros((3, 5)), "b": jnp.ones(5)}, "layer2": {"w": jnp.eye(5, 4), "b": jnp.zeros(4)},
             "layer3": {"w": jnp.eye(4, 2), "b": jnp.ones(2)}}
    zeros = jnp.zeros((512, 3))
    inputs = _("x of zeros (512, 3), layers 3-5-4-2 whose first bias and last bias are 1, rate={rate}, key={key}"
               ).format(rate=RATE, key=key_text(2))
    out = np.asarray(attempt(forward.partial(probe, zeros, rate=RATE).jit().keys_unchecked(), key=jax.random.key(2),
                             name="forward", inputs=inputs), np.float64)
    kept_value = 1.0 + 1.0 / (1.0 - RATE) ** 2  # 1 through both masks, scaled twice, plus the logits' bias
    kept = np.isclose(out, kept_value, rtol=1e-4)
    if np.shape(out) != (512, 2) or not np.all(kept | np.isclose(out, 1.0, rtol=1e-4)) \
            or abs(float(np.mean(kept)) - (1 - RATE) ** 2) > 0.08:
        raise CheckFailed("mask_placement", _(
            "forward({inputs}) gave {values}: each hidden layer's mask multiplies that layer's output, after its bias "
            "and its ReLU, in the layer's own shape, and the logits get none; expected only 1 (a unit dropped) and "
            "{want:.4f} (kept through both layers)").format(
            inputs=inputs, values=numbers(np.unique(np.round(out, 4))[:6]), want=Code(kept_value)))


def _check_masks(out: np.ndarray, inputs: str, rate: float = RATE) -> None:
    """The kept fraction and the kept value tell how many masks were applied, from how many keys, and the scale.

    At a second rate (0.5), a kept fraction of the first rate's means a rate written into the code."""
    kept = float(np.mean(out != 0))
    scale = 1.0 / (1.0 - rate) ** 2
    expected = {"ok": (1 - rate) ** 2, "key_reused": 1 - rate, "dropout_on_logits": (1 - rate) ** 3}
    expected.update({"keep_is_rate": rate ** 2} if rate == RATE else {"rate_ignored": (1 - RATE) ** 2})
    found = min(expected, key=lambda k: abs(expected[k] - kept))
    if abs(expected[found] - kept) > 0.06:
        found = "wrong_fraction"
    if found == "key_reused" and np.allclose(out[out != 0], 1.0 / (1.0 - rate), rtol=1e-3):
        found = "one_layer_masked"  # one mask's fraction and one scale: one layer had dropout, not two alike
    messages = {
        "key_reused": _("with one key, the masks of layer 1 and layer 2 are identical (kept {kept:.0%} of units, "
                        "as one mask would; two independent masks keep {want:.0%}): is the key split per layer?"),
        "one_layer_masked": _("kept {kept:.0%} of units, each scaled once: one hidden layer got a mask and the "
                              "other none; dropout goes after every hidden ReLU, each layer with its own key "
                              "(two independent masks keep {want:.0%})"),
        "dropout_on_logits": _("three masks were applied (kept {kept:.0%}; two keep {want:.0%}): dropout goes after "
                               "the hidden ReLUs only, not on the logits"),
        "keep_is_rate": _("units are kept with probability rate, not 1 - rate (kept {kept:.0%}; {want:.0%} "
                          "expected): bernoulli(key, 1 - rate, shape) gives the mask of kept units"),
        "wrong_fraction": _("kept {kept:.0%} of units through two layers; with rate {rate} it should be about "
                            "{want:.0%}"),
        "rate_ignored": _("with rate {rate} it kept {kept:.0%} of units, what rate 0.2 keeps ({want:.0%} expected): "
                          "the mask and the scale must use the rate forward is given, not a number in the code"),
    }
    if found != "ok":
        raise CheckFailed(found, _("forward({inputs}): ").format(inputs=inputs) + messages[found].format(
            kept=kept, want=(1 - rate) ** 2, rate=rate))
    values = np.unique(np.round(out[out != 0], 4))
    if not np.allclose(values, scale, rtol=1e-3):
        raise CheckFailed("not_scaled", _(
            "forward({inputs}): kept activations of 1 came out as {values}; inverted dropout divides by (1 - rate) "
            "at each layer, here {scale:.4f} after two, so the expected activation stays the same").format(
            inputs=inputs, values=numbers(values[:3]), scale=scale))


def _reference_norms(grads: dict) -> np.ndarray:
    leaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
    return np.sqrt(sum(np.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))


def _first_difference(got, want) -> str:
    """The first example and leaf where `got` differs from `want`, with both values (or both shapes)."""
    if jax.tree.map(np.shape, got) != jax.tree.map(np.shape, want):
        return _("shapes: yours {got}, expected {want}").format(got=jax.tree.map(np.shape, got),
                                                               want=jax.tree.map(np.shape, want))
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        for i in range(w.shape[0]):
            if not close(g[i], w[i]):
                return _("example {i}, leaf {leaf}: yours {got}, expected {want}").format(
                    i=i, leaf=jax.tree_util.keystr(path), got=numbers(g[i].ravel()[:3]), want=numbers(w[i].ravel()[:3]))
    return ""


def check_per_example_grads(ns: Learner) -> None:
    """vmap(grad) equals each example's own gradient, has a batch axis, is one program for any batch; the norms are
    global."""
    per_example, norms = ns["per_example_grads"], ns["grad_norms"]

    # Two models of other sizes: a size written into the answer (5 features, say) holds for one of them only.
    @example((0, 3, (7, 3, 5, 2)))
    @examples(st.tuples(st.integers(0, 2**16), st.sampled_from([1, 3]), st.sampled_from([(5, 4, 6, 3), (7, 3, 5, 2)])),
              n=3)
    def agrees(case):
        seed, batch, sizes = case
        params, (x, y) = make_params(seed, sizes), make_batch(seed, batch, sizes[0], sizes[-1])
        inputs = describe(params=params, x=x, y=y)
        try:
            got = attempt(per_example.jit(), params, x, y, name="per_example_grads", inputs=inputs)
        except CheckFailed as exc:
            if _failed_in_the_batch_loss(exc):  # the commonest mistake: vmap hands loss_fn one example, not a batch
                raise CheckFailed("example_not_a_batch", _(
                    "per_example_grads({inputs}): the given loss_fn failed ({error}): under vmap it receives one "
                    "example, x of shape (features,) and y a single label, but it expects a batch; differentiate "
                    "a loss of one example that gives loss_fn a batch of one").format(
                    inputs=inputs, error=_first_line(exc.__cause__))) from exc
            if "inconsistent sizes" in exc.message or "vmap got" in exc.message:
                raise CheckFailed("in_axes_params_batched", _(
                    "per_example_grads({inputs}): vmap tried to map over the params too (in_axes=(0, 0, 0)?): the "
                    "params are shared by every example, so their axis is None: in_axes=(None, 0, 0)").format(
                    inputs=inputs)) from exc
            raise
        want = example_grads(params, x, y)
        if jax.tree.map(np.shape, got) == jax.tree.map(np.shape, params):
            raise CheckFailed("no_batch_axis", _(
                "per_example_grads({inputs}) returned gradients shaped like the params, without a batch axis: that "
                "is the gradient of the whole batch; vmap grad over the examples").format(inputs=inputs))
        if not close(got, want):
            if all(np.all(np.asarray(g) == 0) for g in jax.tree.leaves(got)):
                raise CheckFailed("zero_gradients", _(
                    "per_example_grads({inputs}): every gradient is exactly 0, so the loss differentiated does not "
                    "depend on the params: a log_softmax over a batch of one along axis 0, say, is 0 whatever the "
                    "logits; differentiate the given loss_fn on a batch of one example").format(inputs=inputs))
            rows_equal = batch > 1 and jax.tree.structure(got) == jax.tree.structure(want) and all(
                np.ndim(g) >= 1 and np.allclose(np.asarray(g), np.asarray(g)[:1], atol=1e-6) for g in jax.tree.leaves(got))
            if rows_equal:
                raise CheckFailed("batch_mean_gradient", _(
                    "per_example_grads({inputs}): every example got the same gradient, the gradient of the batch's "
                    "mean loss ({where}); take one example's loss, jax.grad it, and jax.vmap that over the "
                    "batch").format(inputs=inputs, where=_first_difference(got, want)))
            raise CheckFailed("mismatch", _(
                "per_example_grads({inputs}) differs from a Python loop of jax.grad over the examples: "
                "{where}").format(inputs=inputs, where=_first_difference(got, want)))
        grads = jax.tree.map(lambda g: jnp.asarray(g, jnp.float32), want)  # as per_example_grads gives them
        got_norms = attempt(norms.jit(), grads, name="grad_norms", inputs=_("the gradients above"))
        _check_norms(got_norms, want, inputs)

    agrees()
    # grad_norms of every layer's w and b, for an MLP of two layers too, not only the lesson's three.
    rng = np.random.default_rng(5)
    tree = {f"layer{i + 1}": {"w": jnp.asarray(rng.normal(size=(4, a, b)), jnp.float32),
                              "b": jnp.asarray(rng.normal(size=(4, b)), jnp.float32)}
            for i, (a, b) in enumerate(((3, 2), (2, 1)))}
    inputs = _("the per-example gradients of a {sizes} MLP for {n} examples").format(sizes="3-2-1", n=4)
    _check_norms(attempt(norms.jit(), tree, name="grad_norms", inputs=inputs), tree, inputs)
    tiny = jax.tree.map(lambda g: g * 1e-4, tree)  # norms near 1e-4: an epsilon added "against NaN" shows there
    got = attempt(norms.jit(), tiny, name="grad_norms", inputs=inputs + " x 1e-4")
    if np.shape(got) == (4,) and not close(got, want := _reference_norms(tiny), tol=1e-7):
        raise CheckFailed("tiny_norms_off", _(
            "grad_norms is right for gradients of norm near 1 and wrong for tiny ones ({got:.2e} where the norm is "
            "{want:.2e}): an epsilon added inside the square root, \"against NaN\", outweighs a small norm; the square "
            "root of a sum of squares needs no guard here").format(
            got=float(np.ravel(got)[0]), want=float(want[0])))
    params = make_params(0, (5, 4, 6, 3))
    sizes = [per_example.program_size(params, *make_batch(0, b, 5, 3)) for b in (2, 6)]
    if sizes[0] != sizes[1]:
        raise CheckFailed("python_loop", _(
            "per_example_grads builds a bigger program for a bigger batch ({small} operations for 2 examples, "
            "{big} for 6): a Python loop over the examples; jax.vmap gives one program for any batch").format(
            small=sizes[0], big=sizes[1]))
    require_no_loop(per_example, "per_example_grads", params, *make_batch(0, 6, 5, 3))
    _require_linear_work(per_example, params)


def _require_linear_work(per_example: Function, params: dict) -> None:
    """vmap(grad) does one example's backward pass per example: its work grows with the batch. A Jacobian of the
    batch's losses (jax.jacrev, jax.jacfwd) differentiates every loss through the whole batch: it grows with its
    square."""
    small, big = (per_example.flops(params, *make_batch(0, b, 5, 3)) for b in (2, 8))
    if small > 0 and big / small > 6:
        raise CheckFailed("work_grows_quadratically", _(
            "per_example_grads gives the right numbers, but its work grows with the square of the batch ({small:,.0f} "
            "operations for 2 examples, {big:,.0f} for 8): a Jacobian of the batch's losses (jax.jacrev) backpropagates "
            "each loss through every example; jax.vmap(jax.grad(...)) of one example's loss does each example "
            "once").format(small=small, big=big))


def _failed_in_the_batch_loss(exc: CheckFailed) -> bool:
    """Whether what the learner's code raised came from inside the given `loss_fn` (a batch's loss) on bad shapes."""
    cause = raised_behind(exc, "IndexError", "TypeError", "ValueError")
    return cause is not None and "loss_fn" in cause.functions


def _first_line(exc: LearnerRaised) -> str:
    return f"{exc.type_name}: {exc.first_line(120)}"


def _check_norms(got, grads: dict, inputs: str) -> None:
    want = _reference_norms(grads)
    if np.shape(got) != want.shape:
        raise CheckFailed("norms_shape", _("grad_norms returned shape {got}; one norm per example is {want}").format(
            got=np.shape(got), want=want.shape))
    if close(got, want):
        return
    leaves = [np.asarray(g, np.float64).reshape(np.shape(g)[0], -1) for g in jax.tree.leaves(grads)]
    variants = {"norm_squared": want ** 2, "norm_not_global": sum(np.linalg.norm(g, axis=1) for g in leaves)}
    key = next((k for k, v in variants.items() if close(got, v)), "mismatch")
    why = {"norm_squared": _(" (the square root is missing)"),
           "norm_not_global": _(" (a sum of per-layer norms: the global norm is the square root of the sum of all "
                                "the squares)"), "mismatch": ""}[key]
    raise CheckFailed(key, _("grad_norms of the per-example gradients of ({inputs}) gave {got}, expected "
                             "{want}{why}").format(inputs=inputs, got=numbers(got), want=numbers(want), why=why))


def check_any_depth(ns: Learner) -> None:
    """Agrees with the lesson's 3-layer forward, then with the reference at depths 1 to 6, 12 and 25 layers."""
    mlp_forward = ns["mlp_forward"].jit()
    cases = [(depth, (4, *[5 + (i % 2) for i in range(depth - 1)], 3)) for depth in (3, 1, 2, 4, 5, 6)]
    # Twelve layers, whose keys sort as strings in another order than their numbers (layer10 before layer2):
    # square first, so that walking them in jax.tree.leaves order runs and gives numbers that name the mistake.
    cases += [(12, (4,) * 13), (12, (4, *[5 + (i % 2) for i in range(11)], 3))]
    # And deeper than any cap an answer might write into its loop (range(1, 13), say).
    cases += [(25, (4, *[5 + (i % 2) for i in range(24)], 3))]
    for depth, sizes in cases:
        params, (x, _y) = make_params(depth, sizes), make_batch(depth, 2, sizes[0], sizes[-1])
        inputs = describe(params=params, x=x)
        try:
            got = attempt(mlp_forward, params, x, name="mlp_forward", inputs=inputs)
        except CheckFailed as exc:
            if depth != 3:
                raise CheckFailed("depth_hard_coded", _(
                    "mlp_forward works with 3 layers but not with {depth}: {error}; loop over however many "
                    "layers the params hold").format(depth=depth, error=exc.message)) from exc
            raise
        if np.shape(got) != (x.shape[0], sizes[-1]):  # not every layer ran (a loop with a cap), or too many did
            raise CheckFailed("depth_hard_coded" if depth != 3 else "mismatch", _(
                "mlp_forward({inputs}), {depth} layers: the output has shape {got}, not {want}; loop over however "
                "many layers the params hold").format(inputs=inputs, depth=depth, got=np.shape(got),
                                                      want=(x.shape[0], sizes[-1])))
        if not close(got, _reference_forward(params, x)):
            key = ("layers_in_string_order" if close(got, _reference_forward(params, x, string_order=True))
                   else diagnose_forward(got, params, x))
            if key == "mismatch" and depth > 9:  # right up to 6 layers: the order of layer10 and up is off
                key = "layers_out_of_order"
            what = {"layers_out_of_order": _(
                        "right up to 6 layers, wrong with {depth}: the layers ran out of order (sorted by their names, "
                        "or a character of them, layer10 does not come after layer9); walk them by number, "
                        "params[f\"layer{{i}}\"] for i from 1 to N").format(depth=depth),
                    "mismatch": _("the output differs from running layer1 to layer{depth} in order, with a ReLU "
                                  "between them").format(depth=depth),
                    "layers_in_string_order": _(
                        "the layers ran in jax.tree.leaves order, which sorts the keys as strings (layer1, layer10, "
                        "layer11, layer12, layer2, ...): count the layers with jax.tree.leaves, then walk them by "
                        "number, params[f\"layer{i}\"]")}.get(key) or _(FORWARD_MISTAKES[key])
            raise CheckFailed(key, _("mlp_forward({inputs}), {depth} layers: {what}").format(
                inputs=inputs, depth=depth, what=what))


def check_jit_timing(ns: Learner) -> None:
    """time_call waits for results, leaves the compile out, and returns seconds per call; compare_jit times both."""
    time_call, compare_jit = ns["time_call"], ns["compare_jit"]
    compile_s, work_s, repeats = 0.5, 0.04, 5
    # A stand-in for a jitted function whose cost is known, built in the learner's process (probe.FakeJitted).
    fake = Prop("fake_jitted", {"compile_s": compile_s, "work_s": work_s, "spread": (1.0,)})
    inputs = _("f (compiles in {compile_s:g} s, then {work_s:g} s of work per call), repeats={repeats}").format(
        compile_s=compile_s, work_s=work_s, repeats=repeats)
    seconds = _timed(time_call, fake, repeats, inputs)
    observed = fake.observed  # how often it was called and waited for, and whether the warm-up was
    report = _("time_call({inputs}) measured {seconds:.3f} s per call over {calls} calls").format(
        inputs=inputs, seconds=seconds, calls=observed["calls"])
    if observed["waits"] == 0:
        raise CheckFailed("no_block_until_ready", report + _(
            ": it never waits for a result; JAX returns before the work is done, so call "
            "jax.block_until_ready(result) before stopping the clock"))
    # Every call waited for and still no time: the clock missed the waits (a call left running is told below).
    if seconds < 0.5 * work_s and observed["waits"] >= observed["calls"]:
        raise CheckFailed("cpu_clock", report + _(
            ": it waits for each result, but its clock did not count the wait: time.process_time and "
            "time.thread_time count this process's CPU time, and waiting for a device is not; use "
            "time.perf_counter()"))
    require_finite(seconds, "time_call", inputs)
    if 0.85 * 1000 * work_s <= seconds <= 1.5 * 1000 * work_s:
        raise CheckFailed("milliseconds", report + _(": that is milliseconds; time_call returns seconds, as "
                                                     "time.perf_counter() counts them"))
    if 0.85 * repeats * work_s <= seconds <= 1.15 * repeats * work_s:
        raise CheckFailed("total_not_mean", report + _(": that is the total; divide by the number of calls"))
    if observed["calls"] > repeats + 1:
        raise CheckFailed("repeats_ignored", report + _(
            ": once to warm up, then the repeats it is given, here {repeats}, are {calls} calls; use the argument, "
            "not a count in the code").format(repeats=repeats, calls=repeats + 1))
    if observed["calls"] <= repeats or seconds > work_s + 0.25 * compile_s / repeats:
        raise CheckFailed("no_warmup", report + _(
            "; the first call compiles ({compile_s:g} s): call f once, and wait for it, before starting the "
            "clock").format(compile_s=compile_s))
    if not observed["warm_up_waited"]:
        raise CheckFailed("warm_up_not_waited", report + _(
            "; the warm-up call's result was not waited for, so its work was still running when the clock "
            "started: jax.block_until_ready(f(*args)) once, then start the clock"))
    if observed["waits"] < observed["calls"]:
        raise CheckFailed("not_each_waited", report + _(
            "; it waited for {waits} of the {calls} results: wait for each call's result (jax.block_until_ready) "
            "before the next call, as the statement asks; waiting for the last alone times the device's queue, its "
            "calls overlapping with the dispatch of the next").format(waits=observed["waits"], calls=observed["calls"]))
    if seconds > 1.5 * work_s:
        raise CheckFailed("mismatch", report + _("; each call takes {work_s:g} s").format(work_s=work_s))
    # Another count of repeats, and calls that take 0.1, 0.3 and 2.6 times work_s in turn (a mean of work_s, a median
    # of 0.3): a count or a division written in the code, the fastest, the median or the slowest call shows there.
    other = Prop("fake_jitted", {"compile_s": compile_s, "work_s": work_s, "spread": SPREAD})
    seconds = _timed(time_call, other, 3, inputs.replace(f"repeats={repeats}", "repeats=3"))
    if other.observed["calls"] != 4:
        raise CheckFailed("repeats_ignored", _(
            "time_call(..., repeats=3) called f {calls} times: once to warm up, then the repeats it is given, "
            "here 3").format(calls=other.observed["calls"]))
    require_finite(seconds, "time_call", inputs)
    # Each call's time is known; a statistic other than the mean lands near the one it is (the timed calls take
    # 0.3, 0.1 and 2.6 times work_s; a division by 10 or by repeats + 1 gives 0.3 or 0.75 too, told as the median).
    # The nearest by ratio, the mean among them: the wait around each call only adds time, so on a busy machine a
    # median measured a few ms long still reads as the median, not as a division gone wrong.
    ratios = {"min_not_mean": min(SPREAD), "median_not_mean": sorted(SPREAD)[1], "max_not_mean": max(SPREAD), None: 1.0}
    nearest = min(ratios, key=lambda name: abs(math.log(max(seconds, 1e-12) / (ratios[name] * work_s))))
    statistic = nearest if nearest and 0.5 <= seconds / (ratios[nearest] * work_s) <= 2.0 else None
    if statistic:
        raise CheckFailed(statistic, _(
            "time_call(..., repeats=3) measured {seconds:.3f} s per call where the calls take {times} s, {work_s} s "
            "on average: that is the {which}; return the mean time per call, the timed calls' total divided by the "
            "repeats").format(seconds=seconds, work_s=format_number(work_s, "g"),
                             times=list_separator().join(format_number(k * work_s, "g") for k in SPREAD), which={
                                 "min_not_mean": _("fastest call"), "median_not_mean": _("median"),
                                 "max_not_mean": _("slowest call")}[statistic]))
    if not 0.85 * work_s <= seconds <= 1.3 * work_s:
        raise CheckFailed("not_per_call", _(
            "time_call(..., repeats=3) measured {seconds:.3f} s per call, where each call takes {work_s:g} s: divide "
            "the time of the timed calls by the repeats you were given (the warm-up is not one of them)").format(
            seconds=seconds, work_s=work_s))
    _check_any_result(time_call)
    _check_compare_jit(compare_jit)


def _timed(time_call: Function, fake: Prop, repeats: int, inputs: str) -> float:
    """The seconds `time_call` measures for the stand-in `fake`; put under jax.jit by time_call itself, said so."""
    try:
        return float(attempt(time_call, fake, 1.0, repeats=repeats, name="time_call", inputs=inputs))
    except CheckFailed as exc:
        if fake.observed.get("jit_wraps"):  # a stand-in JAX cannot trace: what it raised says nothing of the mistake
            raise CheckFailed("jit_inside", _(
                "time_call({inputs}) put f under jax.jit itself: time_call times the function it is given, as it "
                "is; compare_jit gives it jax.jit(f) for the jitted time and f for the other").format(
                inputs=inputs)) from exc
        raise


def _check_any_result(time_call: Function) -> None:
    """A function that returns more than an array (a loss and its gradients) is timed too: jax.block_until_ready takes
    any pytree, where `result.block_until_ready()` exists on a JAX array only."""
    pair = Prop("fake_jitted", {"compile_s": 0.0, "work_s": 0.01, "spread": (1.0,), "pair": True})
    inputs = _("f returning a pair (a result, a number), repeats=2")
    try:
        attempt(time_call, pair, 1.0, repeats=2, name="time_call", inputs=inputs)
    except CheckFailed as exc:
        if exc.key == "raised" and "block_until_ready" in exc.message:
            raise CheckFailed("method_not_pytree", _(
                "time_call({inputs}) raised: result.block_until_ready() exists on a JAX array only, not on a tuple or "
                "a dict, which a jitted function often returns; jax.block_until_ready(result) waits for every array "
                "in any pytree").format(inputs=inputs)) from exc
        raise


def _check_compare_jit(compare_jit: Function) -> None:
    """Both times taken, each of its own function, with the repeats passed on."""
    # f(x) = tanh(x) @ tanh(x).T, which sleeps EAGER_S whenever it runs without jit and records each run: traced
    # (inside jax.jit) or not (probe.SlowWithoutJit).
    f = Prop("slow_without_jit", {"eager_s": EAGER_S})
    result = attempt(compare_jit, f, jnp.ones((8, 8)), repeats=2, name="compare_jit", inputs="f, x, repeats=2")
    runs = f.observed["runs"]
    if not (isinstance(result, dict) and {"nojit", "jit"} <= set(result)):
        raise CheckFailed("returns", _('compare_jit must return {{"nojit": seconds, "jit": seconds}}; it returned '
                                       '{got}').format(got=repr(result)[:80]))
    if not any(runs):
        raise CheckFailed("jit_not_used", _("compare_jit never ran f under jax.jit: time jax.jit(f) too"))
    if all(runs):
        raise CheckFailed("nojit_missing", _("compare_jit only ran f under jax.jit: time f itself too, "
                                             "without jit"))
    if runs.count(False) != 2 + 1:  # time_call(f, repeats=2): a warm-up and 2 timed calls run f's Python
        raise CheckFailed("repeats_ignored", _(
            "compare_jit(f, x, repeats=2) ran f {n} times without jit: one warm-up and 2 timed calls are 3; pass "
            "repeats on to time_call").format(n=runs.count(False)))
    # A new jax.jit(f) for every call time_call makes (a warm-up and 2 timed); a wrap or two besides them is no
    # mistake. Counted where the file calls jax.jit by that name (probe.jits_counted).
    if f.observed.get("jit_wraps", 0) >= 2 + 1:
        raise CheckFailed("jit_rewrapped", _(
            "compare_jit(f, x, repeats=2) wrapped f in jax.jit {n} times: each jax.jit(f) is a new function, whose "
            "first call finds the compiled program again on JAX's slow path, and that is what was timed; wrap f "
            "once, jitted = jax.jit(f), and time that one function").format(n=f.observed["jit_wraps"]))
    if not result["jit"] < EAGER_S <= result["nojit"]:
        raise CheckFailed("times_swapped", _(
            "compare_jit returned {{\"nojit\": {nojit:.4f}, \"jit\": {jit:.4f}}} for an f that sleeps {eager:g} s "
            "whenever it runs without jit: the two times are swapped, or not f's own; \"nojit\" is time_call(f, "
            "...), \"jit\" is time_call(jax.jit(f), ...)").format(nojit=Code(float(result["nojit"])),
                                                                   jit=Code(float(result["jit"])), eager=EAGER_S))
