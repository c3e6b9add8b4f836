# expect: nojit_missing
def compare_jit(f, *args, repeats=10):
    fast = jax.jit(f)
    return {"nojit": time_call(fast, *args, repeats=repeats), "jit": time_call(fast, *args, repeats=repeats)}
