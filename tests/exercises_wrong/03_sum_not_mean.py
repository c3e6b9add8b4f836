# expect: sum_not_mean
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.sum(log_probs[jnp.arange(y.shape[0]), y])
