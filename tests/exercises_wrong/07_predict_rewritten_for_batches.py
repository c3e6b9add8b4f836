# expect: predict_not_mapped
def predict(w, b, x):
    return (x - jnp.mean(x, axis=-1, keepdims=True)) @ w + b  # now takes a batch too


def batched_predict(w, b, xs):
    return predict(w, b, xs)
