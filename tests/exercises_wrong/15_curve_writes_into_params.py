# expect: mutated_input
def grad_norm_curve(params, batches, optimizer):
    opt_state, norms = optimizer.init(params), []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params.update(optax.apply_updates(params, updates))  # the caller's dict, updated in place
    return jnp.stack(norms)
