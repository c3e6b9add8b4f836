# expect: wrong_sign
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return jnp.mean(log_probs[jnp.arange(y.shape[0]), y])
