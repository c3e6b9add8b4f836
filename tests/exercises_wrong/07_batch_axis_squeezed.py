# expect: mismatch
def batched_predict(w, b, xs):
    return jnp.squeeze(jax.vmap(predict, in_axes=(None, None, 0))(w, b, xs))  # "a cleaner shape"
