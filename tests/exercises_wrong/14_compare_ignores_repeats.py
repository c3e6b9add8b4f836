# expect: repeats_ignored
def compare_jit(f, *args, repeats=10):
    return {"nojit": time_call(f, *args), "jit": time_call(jax.jit(f), *args)}
