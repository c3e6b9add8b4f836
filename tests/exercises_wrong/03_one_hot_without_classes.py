# expect: raised
def loss_fn(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(y) * jax.nn.log_softmax(logits), axis=-1))
