# expect: curve_not_array
def grad_norm_curve(params, batches, optimizer):
    opt_state = optimizer.init(params)
    norms = []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return norms  # a Python list, not one array
