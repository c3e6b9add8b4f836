# expect: warm_up_not_waited
def time_call(f, *args, repeats=10):
    f(*args)  # the warm-up, not waited for: its work still runs when the clock starts
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - start) / repeats
