# expect: not_scalar
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -log_probs[jnp.arange(y.shape[0]), y]
