"""`jaxintro tour`: every idea of the lesson, in order, run for real and printed with its values."""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

Out = Callable[[str], None]


def arrays(out: Out) -> dict[str, Any]:
    """jnp arrays look like NumPy and broadcast like NumPy."""
    a = jnp.arange(6.0).reshape(2, 3)
    b = jnp.array([10.0, 20.0, 30.0])
    out(f"a = jnp.arange(6.0).reshape(2, 3) ->\n{a}")
    out(f"a + b with b = {b} broadcasts (2, 3) + (3,) ->\n{a + b}")
    out(f"a.dtype = {a.dtype} (JAX defaults to float32), a @ b = {a @ b}")
    return {"sum": (a + b).tolist(), "dtype": str(a.dtype)}


def immutability(out: Out) -> dict[str, Any]:
    """JAX arrays are immutable: `.at[...].set` returns a new array."""
    a = jnp.zeros(3)
    try:
        a[0] = 5  # type: ignore[index]
        message = "(no error?)"
    except TypeError as exc:
        message = str(exc).splitlines()[0]
    out(f"a[0] = 5 raises TypeError: {message}")
    b = a.at[0].set(5.0)
    out(f"b = a.at[0].set(5.0) -> {b}; a is unchanged: {a}")
    return {"error": message, "b": b.tolist(), "a": a.tolist()}


def grad(out: Out) -> dict[str, Any]:
    """`jax.grad` turns a function into its derivative; it composes."""
    f = lambda x: x**2  # noqa: E731
    df, d2f = jax.grad(f), jax.grad(jax.grad(f))
    out(f"f(x) = x**2; grad(f)(3.0) = {df(3.0)}; grad(grad(f))(3.0) = {d2f(3.0)}")
    g = lambda x: jnp.sin(x) * x  # noqa: E731
    out(f"grad(sin(x) * x)(1.0) = {jax.grad(g)(1.0):.6f} (= sin 1 + cos 1 = {np.sin(1) + np.cos(1):.6f})")
    return {"df": float(df(3.0)), "d2f": float(d2f(3.0))}


def jit(out: Out) -> dict[str, Any]:
    """The first call traces and compiles; later calls reuse the program. Time them warm, with block_until_ready."""

    def selu(x, alpha=1.67, scale=1.05):
        return scale * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)

    x = jax.random.normal(jax.random.key(0), (1_000_000,))
    fast = jax.jit(selu)
    start = time.perf_counter()
    fast(x).block_until_ready()
    first = time.perf_counter() - start
    times, eager = [], []
    for _ in range(20):
        start = time.perf_counter()
        fast(x).block_until_ready()
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        selu(x).block_until_ready()
        eager.append(time.perf_counter() - start)
    later, plain = float(np.median(times)), float(np.median(eager))
    out(f"jit(selu) on 1M floats: first call (trace + compile + run) {first * 1e3:.1f} ms, "
        f"later calls {later * 1e3:.2f} ms (median of 20)")
    out(f"without jit, op by op: {plain * 1e3:.2f} ms -> jit is {plain / later:.1f}x faster once compiled. "
        "Without block_until_ready you would time only the dispatch, not the work.")
    return {"first_ms": first * 1e3, "later_ms": later * 1e3, "eager_ms": plain * 1e3}


def control_flow(out: Out) -> dict[str, Any]:
    """A Python `if` on a traced value fails under jit; `lax.cond` and `lax.scan` replace it."""

    @jax.jit
    def relu_if(x):
        if x > 0:  # a tracer has no truth value
            return x
        return 0.0

    try:
        relu_if(1.0)
        message = "(no error?)"
    except jax.errors.TracerBoolConversionError as exc:
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    out(f"Python if on a traced value -> {message}")
    relu_cond = jax.jit(lambda x: jax.lax.cond(x > 0, lambda v: v, jnp.zeros_like, x))
    out(f"lax.cond: relu(2.0) = {relu_cond(2.0)}, relu(-2.0) = {relu_cond(-2.0)}")
    total, partial = jax.lax.scan(lambda c, v: (c + v, c + v), 0.0, jnp.arange(1.0, 6.0))
    out(f"lax.scan cumulative sum of [1..5]: carry = {total}, stacked = {partial}")
    return {"error": message, "cond": [float(relu_cond(2.0)), float(relu_cond(-2.0))], "scan": partial.tolist()}


def vmap(out: Out) -> dict[str, Any]:
    """`vmap` adds a batch axis; `in_axes` says which argument carries it."""
    w = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    xs = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    single = lambda w, x: w @ x  # noqa: E731
    batched = jax.vmap(single, in_axes=(None, 0))(w, xs)
    out(f"vmap(lambda w, x: w @ x, in_axes=(None, 0)) over 3 vectors ->\n{batched}")
    return {"batched": batched.tolist()}


def per_example(out: Out) -> dict[str, Any]:
    """Per-example gradients: vmap of grad, one gradient per example instead of their mean."""
    w = jnp.array([0.5, -1.0])
    xs = jnp.array([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]])
    ys = jnp.array([1.0, 0.0, 2.0])
    loss = lambda w, x, y: (x @ w - y) ** 2  # noqa: E731
    per = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
    mean = jax.grad(lambda w: jnp.mean(jax.vmap(loss, in_axes=(None, 0, 0))(w, xs, ys)))(w)
    out(f"per-example grads of (x.w - y)^2 ->\n{per}\ntheir mean {per.mean(0)} = the batch gradient {mean}")
    return {"per": per.tolist(), "mean": mean.tolist()}


def pytrees(out: Out) -> dict[str, Any]:
    """Parameters are pytrees: nested dicts/lists/tuples of arrays that jax.tree.map walks."""
    params = {
        "layer1": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)},
        "layer2": {"w": jnp.ones((2, 1)), "b": jnp.zeros(1)},
    }
    shapes = jax.tree.map(lambda a: a.shape, params)
    scaled = jax.tree.map(lambda a: 0.5 * a, params)
    count = sum(a.size for a in jax.tree.leaves(params))
    out(f"jax.tree.map(shape) -> {shapes}")
    out(f"{len(jax.tree.leaves(params))} leaves, {count} parameters; jax.tree.map(0.5 * a) halves them all: "
        f"layer1.w[0] = {scaled['layer1']['w'][0]}")
    return {"count": count, "leaves": len(jax.tree.leaves(params))}


def prng(out: Out) -> dict[str, Any]:
    """PRNG keys are explicit values: the same key gives the same numbers; split for new streams."""
    key = jax.random.key(42)
    a = jax.random.normal(key, (3,))
    b = jax.random.normal(key, (3,))
    k1, k2 = jax.random.split(key)
    c = jax.random.normal(k1, (3,))
    out(f"normal(key(42)) twice: {a} and {b} (identical)")
    out(f"after split: normal(k1) = {c} (a new stream); key(42) always splits the same way")
    return {"same": bool(jnp.array_equal(a, b)), "different": not bool(jnp.array_equal(a, c))}


def debug_print(out: Out) -> dict[str, Any]:
    """`print` inside jit sees tracers; `jax.debug.print` prints the runtime values."""
    seen: list[str] = []

    @jax.jit
    def f(x):
        seen.append(f"print() at trace time: {x}")
        jax.debug.print("jax.debug.print at run time: x = {x}, x * 2 = {y}", x=x, y=x * 2)
        return x * 2

    f(jnp.array(3.0)).block_until_ready()
    jax.effects_barrier()
    out(seen[0])
    return {"trace_print": seen[0]}


def sharding(out: Out) -> dict[str, Any]:
    """Data parallelism with `jax.shard_map`: each device sums its shard, `lax.psum` combines them."""
    from jax.sharding import PartitionSpec as P

    from jaxintro.parallel import make_mesh

    n = len(jax.devices())
    mesh = make_mesh(n)
    x = jnp.arange(8.0 * n)
    total = jax.jit(jax.shard_map(lambda s: jax.lax.psum(jnp.sum(s), "data"), mesh=mesh, in_specs=P("data"),
                                  out_specs=P()))(x)
    out(f"{n} device(s) {[str(d) for d in jax.devices()]}; shard_map sum of arange({8 * n}) = {total} "
        f"(each device summed {8} numbers; psum added the {n} partial sums)")
    return {"devices": n, "total": float(total)}


SECTIONS: dict[str, Callable[[Out], dict[str, Any]]] = {
    "arrays": arrays,
    "immutability": immutability,
    "grad": grad,
    "jit": jit,
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
        fn = SECTIONS[name]
        out(f"\n== {i}. {name}: {fn.__doc__}")
        results[name] = fn(out)
    return results
