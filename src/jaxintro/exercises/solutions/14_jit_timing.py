"""Exercise 4: jit against no jit, timed honestly: warm-up first, and wait for the result."""

import time

import jax
import jax.numpy as jnp


def time_call(f, *args, repeats: int = 10) -> float:
    """Mean seconds per call of f(*args) over `repeats` calls, after one warm-up call, each result waited for."""
    # >>> solution
    jax.block_until_ready(f(*args))  # warm-up: the first call of a jitted f traces and compiles
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))  # JAX returns before the work is done: wait for it
    return (time.perf_counter() - start) / repeats
    # <<<


def compare_jit(f, *args, repeats: int = 10) -> dict:
    """{"nojit": seconds per call of f itself, "jit": seconds per call of jax.jit(f)}, both with time_call."""
    # >>> solution
    return {"nojit": time_call(f, *args, repeats=repeats), "jit": time_call(jax.jit(f), *args, repeats=repeats)}
    # <<<
