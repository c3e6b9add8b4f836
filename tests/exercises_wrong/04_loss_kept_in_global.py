# expect: tracer_in_global
last_loss = None


@jax.jit
def train_step(params, opt_state, x, y):
    global last_loss
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    last_loss = loss  # to print it later: under jit this keeps a tracer, once
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
