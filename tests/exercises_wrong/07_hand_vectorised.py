# expect: predict_not_mapped
def batched_predict(w, b, xs):
    # predict's math for a whole batch: each row centred on its own mean
    return (xs - jnp.mean(xs, axis=1, keepdims=True)) @ w + b
