# expect: returns_out_of_order
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return opt_state, optax.apply_updates(params, updates), loss  # the state first
