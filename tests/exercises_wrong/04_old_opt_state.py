# expect: opt_state_not_updated
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, _new_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss  # the old state: Adam forgets its moments
