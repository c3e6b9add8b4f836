# expect: no_warmup
def time_call(f, *args, repeats=10):
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))  # the first call compiles, inside the timed loop
    return (time.perf_counter() - start) / repeats
