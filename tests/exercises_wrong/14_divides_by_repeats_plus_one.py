# expect: not_per_call
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - start) / (repeats + 1)  # counts the warm-up, which the clock did not
