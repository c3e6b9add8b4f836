# expect: no_block_until_ready
def time_call(f, *args, repeats=10):
    f(*args)
    start = time.perf_counter()
    for _ in range(repeats):
        f(*args)  # returns before the work is done
    return (time.perf_counter() - start) / repeats
