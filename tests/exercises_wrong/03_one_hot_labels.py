# expect: one_hot_labels
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(jnp.sum(log_probs * y, axis=-1))  # written for one-hot labels
