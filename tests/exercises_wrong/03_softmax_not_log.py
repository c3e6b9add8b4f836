# expect: softmax_not_log_softmax
def loss_fn(params, x, y):
    probs = jax.nn.softmax(forward(params, x))
    return -jnp.mean(probs[jnp.arange(y.shape[0]), y])
