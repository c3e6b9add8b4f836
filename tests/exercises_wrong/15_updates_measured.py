# expect: norm_of_updates
def grad_norm_curve(params, batches, optimizer):
    opt_state, norms = optimizer.init(params), []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        norms.append(global_norm(updates))  # the step taken, not the gradient
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
