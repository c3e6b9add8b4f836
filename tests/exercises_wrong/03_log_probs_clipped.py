# expect: large_logits_wrong
def loss_fn(params, x, y):
    log_probs = jnp.clip(jax.nn.log_softmax(forward(params, x)), -10.0, 0.0)  # "to avoid huge numbers"
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))
