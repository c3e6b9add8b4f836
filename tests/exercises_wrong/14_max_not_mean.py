# expect: max_not_mean
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return max(times)  # the worst case
