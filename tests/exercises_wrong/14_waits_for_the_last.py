# expect: not_each_waited
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = f(*args)
    jax.block_until_ready(out)  # the last one only: the calls before it queue up
    return (time.perf_counter() - start) / repeats
