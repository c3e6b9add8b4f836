# expect: unstable_log_softmax
def loss_fn(params, x, y):
    logits = forward(params, x)
    log_probs = logits - jnp.log(jnp.sum(jnp.exp(logits), axis=-1, keepdims=True))  # exp overflows
    return -jnp.mean(log_probs[jnp.arange(y.shape[0]), y])
