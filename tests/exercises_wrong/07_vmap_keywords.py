# expect: vmap_keyword_arguments
def batched_predict(w, b, xs):
    return jax.vmap(predict, in_axes=(None, None, 0))(w=w, b=b, x=xs)
