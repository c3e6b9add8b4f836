# expect: jit_inside
def time_call(f, *args, repeats=10):
    f = jax.jit(f)  # compare_jit's job: time_call times f as it is given
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - start) / repeats
