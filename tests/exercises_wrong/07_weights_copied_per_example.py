# expect: weights_mapped
def batched_predict(w, b, xs):
    n = xs.shape[0]
    return jax.vmap(predict)(jnp.broadcast_to(w, (n, *w.shape)), jnp.broadcast_to(b, (n, *b.shape)), xs)  # a copy each
