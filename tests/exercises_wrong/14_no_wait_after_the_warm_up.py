# expect: not_each_waited
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        f(*args)  # the warm-up waited for, the timed calls not
    return (time.perf_counter() - start) / repeats
