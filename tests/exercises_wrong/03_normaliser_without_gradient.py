# expect: wrong_gradient
def loss_fn(params, x, y):
    logits = forward(params, x)
    # "for stability": the normaliser as a constant, so its part of the gradient is lost
    log_probs = logits - jax.lax.stop_gradient(jax.nn.logsumexp(logits, axis=-1, keepdims=True))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))
