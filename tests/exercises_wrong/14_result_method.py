# expect: method_not_pytree
def time_call(f, *args, repeats=10):
    f(*args).block_until_ready()  # an array's method: a tuple or a dict has none
    start = time.perf_counter()
    for _ in range(repeats):
        f(*args).block_until_ready()
    return (time.perf_counter() - start) / repeats
