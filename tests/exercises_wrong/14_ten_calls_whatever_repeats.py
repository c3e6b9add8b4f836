# expect: repeats_ignored
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - start) / repeats
