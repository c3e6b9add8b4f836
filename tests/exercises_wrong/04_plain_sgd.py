# expect: optimizer_not_used
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), opt_state, loss
