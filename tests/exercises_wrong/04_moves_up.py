# expect: moved_up_the_gradient
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: p - u, params, updates), opt_state, loss  # the updates already point down
