# expect: jit_rewrapped
def compare_jit(f, *args, repeats=10):
    # a new jax.jit(f) for every call: each one's first call takes JAX's slow path
    return {"nojit": time_call(f, *args, repeats=repeats),
            "jit": time_call(lambda *a: jax.jit(f)(*a), *args, repeats=repeats)}
