"""`jaxintro tour`: every idea of the lesson, in order, run for real and printed with its values.

Each section prints through `out` and returns the values it printed, so tests check the numbers and
not the prose. What a learner reads goes through `_()` (gettext): titles are marked with `N_` where
they are defined and translated when printed; code, numbers and JAX's own messages are not translated.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxintro.config import LESSON_SIZES
from jaxintro.i18n import N_, _, ngettext
from jaxintro.models import mlp, param_count
from jaxintro.parallel import make_mesh

Out = Callable[[str], None]
Section = Callable[[Out], dict[str, Any]]
F = TypeVar("F", bound=Section)


def titled(title: str) -> Callable[[F], F]:
    """Make `title` (marked with `N_`, translated when printed) the section's docstring and heading."""

    def mark(fn: F) -> F:
        fn.__doc__ = title
        return fn

    return mark


def title(name: str) -> str:
    """The heading of section `name` in the chosen language."""
    return _(SECTIONS[name].__doc__ or name)


@titled(N_("jnp arrays look like NumPy and broadcast like NumPy."))
def arrays(out: Out) -> dict[str, Any]:
    a = jnp.arange(6.0).reshape(2, 3)
    b = jnp.array([10.0, 20.0, 30.0])
    out(f"a = jnp.arange(6.0).reshape(2, 3) ->\n{a}")
    out(_("a + b with b = {b} broadcasts (2, 3) + (3,) ->\n{total}").format(b=b, total=a + b))
    out(_("a.dtype = {dtype} (JAX defaults to float32), a @ b = {product}").format(dtype=a.dtype, product=a @ b))
    return {"sum": (a + b).tolist(), "dtype": str(a.dtype)}


@titled(N_("JAX arrays are immutable: `.at[...].set` returns a new array."))
def immutability(out: Out) -> dict[str, Any]:
    a = jnp.zeros(3)
    try:
        a[0] = 5  # type: ignore[index]
        message = _("(no error?)")
    except TypeError as exc:
        message = str(exc).splitlines()[0]  # JAX's own words, quoted as they are
    out(_("a[0] = 5 raises TypeError: {message}").format(message=message))
    b = a.at[0].set(5.0)
    out(_("b = a.at[0].set(5.0) -> {b}; a is unchanged: {a}").format(b=b, a=a))
    return {"error": message, "b": b.tolist(), "a": a.tolist()}


@titled(N_("`jax.grad` turns a function into its derivative; it composes."))
def grad(out: Out) -> dict[str, Any]:
    f = lambda x: x**2  # noqa: E731
    df, d2f = jax.grad(f), jax.grad(jax.grad(f))
    out(f"f(x) = x**2; grad(f)(3.0) = {df(3.0)}; grad(grad(f))(3.0) = {d2f(3.0)}")
    g = lambda x: jnp.sin(x) * x  # noqa: E731
    out(f"grad(sin(x) * x)(1.0) = {jax.grad(g)(1.0):.6f} (= sin 1 + cos 1 = {np.sin(1) + np.cos(1):.6f})")
    return {"df": float(df(3.0)), "d2f": float(d2f(3.0))}


def lesson_batch(batch: int = 8) -> tuple[Callable, Any, jax.Array, jax.Array]:
    """The lesson's `loss_fn` on its 784-256-128-10 MLP, with He-initialised parameters and a small random batch."""
    from jaxintro.lesson import loss_fn

    model = mlp.build(LESSON_SIZES)
    params = jax.jit(model.init)(jax.random.key(0))  # one compiled program, not dozens of eager ops
    x = jax.random.uniform(jax.random.key(1), (batch, LESSON_SIZES[0]))
    y = jnp.arange(batch) % 10

    def loss(params, x, y):
        return loss_fn(params, model.apply, x, y)

    return loss, params, x, y


@titled(N_("Beyond first derivatives: `grad` of `grad` of `grad`, Jacobians both ways, a Hessian."))
def derivatives(out: Out) -> dict[str, Any]:
    f = lambda x: x * jnp.sin(x)  # noqa: E731
    d1, d2, d3 = jax.grad(f), jax.grad(jax.grad(f)), jax.grad(jax.grad(jax.grad(f)))
    x0 = 1.0
    auto = [float(d(x0)) for d in (d1, d2, d3)]
    s, c = np.sin(x0), np.cos(x0)
    exact = [s + x0 * c, 2 * c - x0 * s, -3 * s - x0 * c]
    out(_("f(x) = x sin x; by hand f' = sin x + x cos x, f'' = 2 cos x - x sin x, f''' = -3 sin x - x cos x. "
          "At x = 1.0:"))
    for code, a, e in zip(("grad(f)", "grad(grad(f))", "grad(grad(grad(f)))"), auto, exact):
        out(_("  {code:<26} = {auto:9.6f}   closed form: {exact:9.6f}").format(code=code + "(1.0)", auto=a, exact=e))

    def h(v):
        return jnp.array([v[0] * v[1], v[0] + jnp.sin(v[2])])

    v = jnp.array([1.0, 2.0, 3.0])
    fwd, rev = jax.jacfwd(h)(v), jax.jacrev(h)(v)
    out(_("h(v) = [v0 v1, v0 + sin v2] maps R^3 to R^2; its 2x3 Jacobian at v = {v}:\n{jac}").format(v=v, jac=fwd))
    out(_("jacfwd == jacrev: {same}. jacfwd pushes one tangent per input ({n_in} JVPs); jacrev pulls one "
          "cotangent per output ({n_out} VJPs). Forward mode is cheaper for tall Jacobians (more outputs than "
          "inputs), reverse mode for wide ones.").format(same=bool(jnp.allclose(fwd, rev)), n_in=v.size,
                                                         n_out=fwd.shape[0]))
    loss, params, x, y = lesson_batch()
    n_params = param_count(params)
    out(_("The lesson's loss maps {n} parameters to 1 number: reverse mode gets the whole gradient in 1 VJP, "
          "forward mode would need {n} JVPs. That is why `grad` is reverse mode.").format(n=n_params))

    def loss_of_bias(b):
        return loss({**params, "layer3": {**params["layer3"], "b": b}}, x, y)

    b = params["layer3"]["b"]
    hess = jax.jit(jax.hessian(loss_of_bias))(b)
    # Central differences of the exact gradient, one bias at a time: an independent check of the Hessian.
    eps = 1e-2
    g = jax.jit(jax.grad(loss_of_bias))
    fd = jnp.stack([(g(b + eps * e) - g(b - eps * e)) / (2 * eps) for e in jnp.eye(b.size)])
    asym = float(jnp.max(jnp.abs(hess - hess.T)))
    fd_err = float(jnp.max(jnp.abs(hess - fd)))
    row_sum = float(jnp.max(jnp.abs(hess.sum(axis=1))))
    out(_("jax.hessian of the loss with respect to the last layer's bias: shape {shape}, diagonal {diag}").format(
        shape=tuple(hess.shape), diag=np.round(np.asarray(jnp.diag(hess)), 4)))
    out(_("symmetric: max |H - H^T| = {asym:.1e}; against central finite differences of the gradient "
          "(eps = {eps}): max error {fd_err:.1e}; every row sums to {row_sum:.1e}, because adding the same number "
          "to every logit leaves the softmax unchanged.").format(asym=asym, eps=eps, fd_err=fd_err, row_sum=row_sum))
    return {"auto": auto, "exact": exact, "jacfwd": fwd.tolist(), "jacrev": rev.tolist(), "n_params": n_params,
            "hessian": hess.tolist(), "finite_differences": fd.tolist(), "asymmetry": asym, "fd_error": fd_err,
            "row_sum": row_sum}


@titled(N_("The first call traces and compiles; later calls reuse the program. Time them warm, with "
           "block_until_ready."))
def jit(out: Out) -> dict[str, Any]:
    traces = []

    def selu(x, alpha=1.67, scale=1.05):
        traces.append(x.shape)  # a side effect: runs while JAX traces, not when the program runs
        return scale * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)

    x = jax.random.normal(jax.random.key(0), (1_000_000,))
    fast = jax.jit(selu)
    start = time.perf_counter()
    fast(x).block_until_ready()
    first = time.perf_counter() - start
    times, eager = [], []
    for _i in range(20):
        start = time.perf_counter()
        fast(x).block_until_ready()
        times.append(time.perf_counter() - start)
    jit_traces = len(traces)
    for _i in range(20):
        start = time.perf_counter()
        selu(x).block_until_ready()
        eager.append(time.perf_counter() - start)
    later, plain = float(np.median(times)), float(np.median(eager))
    out(_("jit(selu) on 1M floats: first call (trace + compile + run) {first:.1f} ms, later calls {later:.2f} ms "
          "(median of 20).").format(first=first * 1e3, later=later * 1e3))
    out(ngettext("selu's Python body ran {n} time in 21 calls: only while tracing.",
                 "selu's Python body ran {n} times in 21 calls: only while tracing.", jit_traces).format(n=jit_traces))
    out(_("without jit, op by op: {plain:.2f} ms -> jit is {speedup:.1f}x faster once compiled. Without "
          "block_until_ready you would time only the dispatch, not the work.").format(
        plain=plain * 1e3, speedup=plain / later))
    return {"first_ms": first * 1e3, "later_ms": later * 1e3, "eager_ms": plain * 1e3, "traces": jit_traces}


def count_lowered_ops(stablehlo: str) -> int:
    """Operations in a lowered (StableHLO) program, constants left out."""
    return sum(op != "constant" for op in re.findall(r"= stablehlo\.(\w+)", stablehlo))


def count_compiled_kernels(hlo: str) -> tuple[int, int]:
    """Instructions (parameters left out) and fusions of the entry computation of an optimised HLO module."""
    entry = hlo[hlo.index("\nENTRY"):].split("\n}", 1)[0]
    body = [line for line in entry.splitlines()[1:] if " = " in line and " parameter(" not in line]
    return len(body), sum(" fusion(" in line for line in body)


@titled(N_("`jit` traces a function into a jaxpr, lowers it, and XLA fuses its operations; new shapes retrace."))
def trace(out: Out) -> dict[str, Any]:
    loss, params, x, y = lesson_batch(batch=4)
    jaxpr = jax.make_jaxpr(loss)(params, x, y)
    out(_("jax.make_jaxpr(loss_fn)(params, x[4, 784], y[4]): what JAX sees when it traces the lesson's loss "
          "(shapes and dtypes, no values):\n{jaxpr}").format(jaxpr=jaxpr))
    lowered = jax.jit(loss).lower(params, x, y)
    ops = count_lowered_ops(lowered.as_text())
    kernels, fusions = count_compiled_kernels(lowered.compile().as_text())
    out(_("{eqns} equations at the top of the jaxpr; the lowered program (.lower(...).as_text()) has {ops} "
          "operations; after XLA's optimisation (.compile().as_text()) {kernels} kernels run, {fusions} of them "
          "fusions of several operations.").format(eqns=len(jaxpr.eqns), ops=ops, kernels=kernels, fusions=fusions))

    traces = []

    def scale(v, factor):
        traces.append(v.shape)  # runs only while JAX traces
        return v * factor

    scaled, static = jax.jit(scale), jax.jit(scale, static_argnums=1)
    calls = [
        ("jit(scale)(jnp.ones(3), 2.0)", lambda: scaled(jnp.ones(3), 2.0), N_("first call: trace")),
        ("jit(scale)(jnp.array([7.0, 8.0, 9.0]), 2.0)", lambda: scaled(jnp.array([7.0, 8.0, 9.0]), 2.0),
         N_("new values, same shape and dtype: the program is reused")),
        ("jit(scale)(jnp.ones(3), 3.0)", lambda: scaled(jnp.ones(3), 3.0),
         N_("a new Python float is traced like an array of shape (): reused")),
        ("jit(scale)(jnp.ones(4), 2.0)", lambda: scaled(jnp.ones(4), 2.0), N_("new shape: retraced")),
        # jnp.full with a Python fill value makes a weakly typed array (~float32): same shape, another type.
        ("jit(scale)(jnp.full(3, 7.0), 2.0)", lambda: scaled(jnp.full(3, 7.0), 2.0),
         N_("same shape, but jnp.full gives a weakly typed ~float32 array, another type: retraced")),
        ("jit(scale, static_argnums=1)(jnp.ones(3), 2.0)", lambda: static(jnp.ones(3), 2.0),
         N_("a static argument is part of the cache key: traced")),
        ("jit(scale, static_argnums=1)(jnp.ones(3), 3.0)", lambda: static(jnp.ones(3), 3.0),
         N_("a new static Python scalar: retraced")),
        ("jit(scale, static_argnums=1)(jnp.ones(3), 2.0)", lambda: static(jnp.ones(3), 2.0),
         N_("a static value seen before: reused")),
    ]
    counts = []
    out(_("The retracing trap, counted with a side effect that runs only at trace time:"))
    for code, call, why in calls:
        call().block_until_ready()
        counts.append(len(traces))
        out(_("  {code:<51} traces so far: {count}  ({why})").format(code=code, count=len(traces), why=_(why)))
    return {"eqns": len(jaxpr.eqns), "ops": ops, "kernels": kernels, "fusions": fusions, "traces": counts}


@titled(N_("A Python `if` on a traced value fails under jit; `lax.cond` and `lax.scan` replace it."))
def control_flow(out: Out) -> dict[str, Any]:

    @jax.jit
    def relu_if(x):
        if x > 0:  # a tracer has no truth value
            return x
        return 0.0

    try:
        relu_if(1.0)
        message = _("(no error?)")
    except jax.errors.TracerBoolConversionError as exc:
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"  # JAX's own words, quoted as they are
    out(_("Python if on a traced value -> {message}").format(message=message))
    relu_cond = jax.jit(lambda x: jax.lax.cond(x > 0, lambda v: v, jnp.zeros_like, x))
    out(f"lax.cond: relu(2.0) = {relu_cond(2.0)}, relu(-2.0) = {relu_cond(-2.0)}")
    total, partial = jax.lax.scan(lambda c, v: (c + v, c + v), 0.0, jnp.arange(1.0, 6.0))
    out(_("lax.scan cumulative sum of [1..5]: carry = {carry}, stacked = {stacked}").format(carry=total,
                                                                                          stacked=partial))
    return {"error": message, "cond": [float(relu_cond(2.0)), float(relu_cond(-2.0))], "scan": partial.tolist()}


@titled(N_("`vmap` adds a batch axis; `in_axes` says which argument carries it."))
def vmap(out: Out) -> dict[str, Any]:
    w = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    xs = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    single = lambda w, x: w @ x  # noqa: E731
    batched = jax.vmap(single, in_axes=(None, 0))(w, xs)
    out(_("vmap(lambda w, x: w @ x, in_axes=(None, 0)) over 3 vectors ->\n{batched}").format(batched=batched))
    return {"batched": batched.tolist()}


@titled(N_("Per-example gradients: vmap of grad, one gradient per example instead of their mean."))
def per_example(out: Out) -> dict[str, Any]:
    w = jnp.array([0.5, -1.0])
    xs = jnp.array([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]])
    ys = jnp.array([1.0, 0.0, 2.0])
    loss = lambda w, x, y: (x @ w - y) ** 2  # noqa: E731
    per = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
    mean = jax.grad(lambda w: jnp.mean(jax.vmap(loss, in_axes=(None, 0, 0))(w, xs, ys)))(w)
    out(_("per-example grads of (x.w - y)^2 ->\n{per}\ntheir mean {mean} = the batch gradient {batch}").format(
        per=per, mean=per.mean(0), batch=mean))
    return {"per": per.tolist(), "mean": mean.tolist()}


@titled(N_("Parameters are pytrees: nested dicts/lists/tuples of arrays that jax.tree.map walks."))
def pytrees(out: Out) -> dict[str, Any]:
    params = {
        "layer1": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)},
        "layer2": {"w": jnp.ones((2, 1)), "b": jnp.zeros(1)},
    }
    shapes = jax.tree.map(lambda a: a.shape, params)
    scaled = jax.tree.map(lambda a: 0.5 * a, params)
    count = sum(a.size for a in jax.tree.leaves(params))
    out(f"jax.tree.map(shape) -> {shapes}")
    out(_("{leaves} leaves, {count} parameters; jax.tree.map(0.5 * a) halves them all: layer1.w[0] = {row}").format(
        leaves=len(jax.tree.leaves(params)), count=count, row=scaled["layer1"]["w"][0]))
    return {"count": count, "leaves": len(jax.tree.leaves(params))}


@titled(N_("PRNG keys are explicit values: the same key gives the same numbers; split for new streams."))
def prng(out: Out) -> dict[str, Any]:
    key = jax.random.key(42)
    a = jax.random.normal(key, (3,))
    b = jax.random.normal(key, (3,))
    k1, k2 = jax.random.split(key)
    c = jax.random.normal(k1, (3,))
    same, different = bool(jnp.array_equal(a, b)), not bool(jnp.array_equal(a, c))
    out(_("normal(key(42)) twice: {a} and {b} ({verdict})").format(
        a=a, b=b, verdict=_("identical") if same else _("different")))
    out(_("after split: normal(k1) = {c} ({verdict}); key(42) always splits the same way").format(
        c=c, verdict=_("a new stream") if different else _("the same numbers again")))
    return {"same": same, "different": different}


@titled(N_("`print` inside jit sees tracers; `jax.debug.print` prints the runtime values."))
def debug_print(out: Out) -> dict[str, Any]:
    seen: list[str] = []

    @jax.jit
    def f(x):
        seen.append(_("print() at trace time: {x}").format(x=x))
        # Translated while tracing; JAX fills in {x} and {y} each time the compiled program runs.
        jax.debug.print(_("jax.debug.print at run time: x = {x}, x * 2 = {y}"), x=x, y=x * 2)
        return x * 2

    f(jnp.array(3.0)).block_until_ready()
    jax.effects_barrier()
    out(seen[0])
    return {"trace_print": seen[0]}


@titled(N_("Data parallelism with `jax.shard_map`: each device sums its shard, `lax.psum` combines them."))
def sharding(out: Out) -> dict[str, Any]:
    from jax.sharding import PartitionSpec as P

    n = len(jax.devices())
    mesh = make_mesh(n)
    x = jnp.arange(8.0 * n)
    total = jax.jit(jax.shard_map(lambda s: jax.lax.psum(jnp.sum(s), "data"), mesh=mesh, in_specs=P("data"),
                                  out_specs=P()))(x)
    devices = ngettext("{n} device", "{n} devices", n).format(n=n)
    out(_("{devices} {names}; shard_map sum of arange({size}) = {total} (each device summed {per} numbers; psum "
          "added the {n} partial sums)").format(devices=devices, names=[str(d) for d in jax.devices()],
                                                size=8 * n, total=total, per=8, n=n))
    return {"devices": n, "total": float(total)}


SECTIONS: dict[str, Section] = {
    "arrays": arrays,
    "immutability": immutability,
    "grad": grad,
    "derivatives": derivatives,
    "jit": jit,
    "trace": trace,
    "control-flow": control_flow,
    "vmap": vmap,
    "per-example": per_example,
    "pytrees": pytrees,
    "prng": prng,
    "debug-print": debug_print,
    "sharding": sharding,
}


def run_tour(names: list[str], out: Out = print) -> dict[str, dict[str, Any]]:
    """Run the named sections in order, printing a heading and the values of each."""
    results = {}
    for i, name in enumerate(names, 1):
        out(f"\n== {i}. {name}: {title(name)}")
        results[name] = SECTIONS[name](out)
    return results
