# expect: jit_rewrapped
from jax import jit  # bound once, when the file loads


def compare_jit(f, *args, repeats=10):
    rewrapped = lambda *a: jit(f)(*a)  # noqa: E731 (a new jit(f) for every call)
    return {"nojit": time_call(f, *args, repeats=repeats), "jit": time_call(rewrapped, *args, repeats=repeats)}
