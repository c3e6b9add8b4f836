# expect: in_axes_params_batched
def batched_predict(w, b, xs):
    return jax.vmap(predict, in_axes=(0, 0, 0))(w, b, xs)
