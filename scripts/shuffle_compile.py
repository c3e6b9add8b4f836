"""What compiling the epoch's shuffle costs on this backend, and what else computes the same permutation.

`jax.random.permutation(key, 60000)` (the shuffle `lesson.plan_epoch` draws) sorts 60,000 random 32-bit keys
twice (stable sorts). On a TPU that compile took 13.6 s of the epoch program's 15.9 s. Each variant below is
compiled without the persistent cache and timed, then run; "same" says whether it returns the permutation's
exact indices (only those could replace it without changing every number the docs show):

    JAX_ENABLE_COMPILATION_CACHE=false python scripts/shuffle_compile.py [--size 60000] [--json OUT]
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


def variants(size: int) -> dict[str, Callable[[jax.Array], jax.Array]]:
    """The shuffle and the sorts it is made of, each a function of a key."""
    bits = lambda key: jax.random.bits(key, (size,), jnp.uint32)  # noqa: E731
    return {
        "jax.random.permutation": lambda key: jax.random.permutation(key, size),
        "one stable sort_key_val": lambda key: jax.lax.sort_key_val(bits(key), jnp.arange(size), is_stable=True)[1],
        "one unstable sort_key_val": lambda key: jax.lax.sort_key_val(bits(key), jnp.arange(size), is_stable=False)[1],
        "one sort of the keys alone": lambda key: jax.lax.sort(bits(key)),
        "rows of 128 sorted (not a shuffle)": lambda key: jax.lax.sort(bits(key)[: size // 128 * 128].reshape(-1, 128)),
        "counted ranks and a scatter": lambda key: counted_permutation(key, size),
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
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    key = jax.random.key(0)
    reference = np.asarray(jax.random.permutation(key, args.size))
    print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}), {args.size} elements, "
          f"{rounds(args.size)} sorting rounds, cache {jax.config.jax_enable_compilation_cache}")
    rows = []
    for name, fn in variants(args.size).items():
        same_shape = name in ("jax.random.permutation", "counted ranks and a scatter")
        rows.append(measure(name, fn, key, reference if same_shape else None, args.repeats))
        print(f"{name:38s} compile {rows[-1]['compile_s']:7.3f} s   call {rows[-1]['call_ms']:9.3f} ms   "
              f"same as the permutation: {rows[-1]['same']}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"backend": jax.default_backend(), "size": args.size, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
