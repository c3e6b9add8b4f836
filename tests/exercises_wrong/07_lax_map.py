# expect: loop_not_vmap
def batched_predict(w, b, xs):
    return jax.lax.map(lambda x: predict(w, b, x), xs)  # one row after another: a scan
