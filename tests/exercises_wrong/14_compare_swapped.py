# expect: times_swapped
def compare_jit(f, *args, repeats=10):
    return {"nojit": time_call(jax.jit(f), *args, repeats=repeats), "jit": time_call(f, *args, repeats=repeats)}
