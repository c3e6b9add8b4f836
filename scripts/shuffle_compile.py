"""What compiling the epoch's shuffle costs on this backend, and what else computes the same permutation.

`jax.random.permutation(key, 60000)` (the shuffle `lesson.plan_epoch` draws) sorts 60,000 random 32-bit keys
twice (stable sorts). On a TPU that compile took 13.6 s of the epoch program's 15.9 s. Each variant below is
compiled without the persistent cache and timed, then run; "same" says whether it returns the permutation's
exact indices (only those could replace it without changing every number the docs show):

    JAX_ENABLE_COMPILATION_CACHE=false python scripts/shuffle_compile.py [--size 60000] [--members M] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np


def rounds(size: int) -> int:
    """How many sorts `jax.random.permutation` does for `size` elements (its own formula)."""
    return int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))


def stable_ranks(bits: jax.Array, block: int) -> jax.Array:
    """Each element's place in a stable sort of `bits`, by counting (no sort): smaller keys, and equal keys before it."""
    size = bits.shape[0]
    pad = -size % block
    index = jnp.arange(size + pad)
    padded = jnp.pad(bits, (0, pad))

    def one_block(start):
        mine = jax.lax.dynamic_slice_in_dim(padded, start, block)[:, None]
        ids = jax.lax.dynamic_slice_in_dim(index, start, block)[:, None]
        before = (bits[None, :] < mine) | ((bits[None, :] == mine) & (index[None, :size] < ids))
        return before.sum(axis=1, dtype=jnp.int32)

    return jax.lax.map(one_block, jnp.arange(0, size + pad, block)).reshape(-1)[:size]


def counted_permutation(key: jax.Array, size: int, block: int = 500) -> jax.Array:
    """`jax.random.permutation(key, size)`'s rounds, each stable sort replaced by ranks and a scatter."""
    x = jnp.arange(size)
    for _ in range(rounds(size)):
        key, subkey = jax.random.split(key)
        ranks = stable_ranks(jax.random.bits(subkey, (size,), jnp.uint32), block)
        x = jnp.zeros_like(x).at[ranks].set(x, unique_indices=True)
    return x


def merged_order(keys: jax.Array, runs: int) -> jax.Array:
    """The indices of a stable sort of `keys`, from `runs` short stable sorts merged by binary search (no long sort).

    An element at place i of its sorted run goes after the i before it there, the keys <= it of every earlier run
    and the keys < it of every later run (earlier runs hold smaller indices: that keeps the sort stable).
    """
    size = keys.shape[0]
    length = -(-size // runs)
    padded = jnp.concatenate([keys, jnp.full(runs * length - size, jnp.iinfo(keys.dtype).max, keys.dtype)])
    ids = jnp.arange(runs * length).reshape(runs, length)
    sorted_keys, order = jax.lax.sort_key_val(padded.reshape(runs, length), ids, dimension=1, is_stable=True)
    flat = sorted_keys.reshape(-1)
    left = jax.vmap(lambda run: jnp.searchsorted(run, flat, side="left"))(sorted_keys)
    right = jax.vmap(lambda run: jnp.searchsorted(run, flat, side="right"))(sorted_keys)
    own = jnp.repeat(jnp.arange(runs), length)[None, :]
    run = jnp.arange(runs)[:, None]
    place = jnp.tile(jnp.arange(length), runs) + jnp.where(run < own, right, jnp.where(run > own, left, 0)).sum(0)
    return jnp.zeros(runs * length, order.dtype).at[place].set(order.reshape(-1), unique_indices=True)[:size]


def merged_permutation(key: jax.Array, size: int, runs: int) -> jax.Array:
    """`jax.random.permutation(key, size)`'s rounds, each long sort replaced by `merged_order`."""
    x = jnp.arange(size)
    for _ in range(rounds(size)):
        key, subkey = jax.random.split(key)
        x = x[merged_order(jax.random.bits(subkey, (size,), jnp.uint32), runs)]
    return x


def variants(size: int) -> dict[str, Callable[[jax.Array], jax.Array]]:
    """The shuffle, the sorts it is made of, and what computes the same permutation otherwise: functions of a key."""
    bits = lambda key, n=size: jax.random.bits(key, (n,), jnp.uint32)  # noqa: E731
    stable = {f"one stable sort_key_val of {n}": (lambda key, n=n: jax.lax.sort_key_val(bits(key, n), jnp.arange(n))[1])
              for n in sorted({size, size // 2, size // 4, size // 8})}
    return {
        "jax.random.permutation": lambda key: jax.random.permutation(key, size),
        **stable,
        "one unstable sort_key_val": lambda key: jax.lax.sort_key_val(bits(key), jnp.arange(size), is_stable=False)[1],
        "one sort of the keys alone": lambda key: jax.lax.sort(bits(key)),
        "rows of 128 sorted (not a shuffle)": lambda key: jax.lax.sort(bits(key)[: size // 128 * 128].reshape(-1, 128)),
        "counted ranks and a scatter": lambda key: counted_permutation(key, size),
        **{f"{runs} sorted runs merged": (lambda key, runs=runs: merged_permutation(key, size, runs)) for runs in (4, 8, 16)},
    }


def measure(name: str, fn: Callable, key: jax.Array, reference: np.ndarray | None, repeats: int) -> dict:
    """Compile seconds, the median call in ms, and whether the result is the permutation's."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile()
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(compiled(key))
    calls = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(key))
        calls.append(time.perf_counter() - start)
    same = None if reference is None or out.shape != reference.shape else bool(np.array_equal(out, reference))
    return {"variant": name, "compile_s": round(compile_s, 3), "call_ms": round(statistics.median(calls) * 1e3, 3),
            "same": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--members", type=int, default=1, help="vmap each variant over this many keys (as --seeds)")
    parser.add_argument("--only", default="", help="run only the variants whose name holds this text")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    key = jax.random.key(0) if args.members == 1 else jax.random.split(jax.random.key(0), args.members)
    reference = np.asarray(jax.vmap(lambda k: jax.random.permutation(k, args.size))(key) if args.members > 1
                           else jax.random.permutation(key, args.size))
    print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}), {args.members} x {args.size} elements, "
          f"{rounds(args.size)} sorting rounds, cache {jax.config.jax_enable_compilation_cache}")
    rows = []
    for name, fn in variants(args.size).items():
        if args.only not in name:
            continue
        fn = jax.vmap(fn) if args.members > 1 else fn
        same_shape = name == "jax.random.permutation" or "ranks" in name or "merged" in name
        rows.append(measure(name, fn, key, reference if same_shape else None, args.repeats))
        print(f"{name:38s} compile {rows[-1]['compile_s']:7.3f} s   call {rows[-1]['call_ms']:9.3f} ms   "
              f"same as the permutation: {rows[-1]['same']}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"backend": jax.default_backend(), "size": args.size, "members": args.members, "rows": rows}, out,
                      indent=1)


if __name__ == "__main__":
    main()
