# expect: cpu_clock
def time_call(f, *args, repeats=10):
    jax.block_until_ready(f(*args))
    start = time.process_time()  # CPU time: waiting is not counted
    for _ in range(repeats):
        jax.block_until_ready(f(*args))
    return (time.process_time() - start) / repeats
