# expect: opt_state_restarted
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, optimizer.init(params), params)  # Adam starts again every step
    return optax.apply_updates(params, updates), opt_state, loss
