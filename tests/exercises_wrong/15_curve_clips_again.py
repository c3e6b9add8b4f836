# expect: mismatch
def grad_norm_curve(params, batches, optimizer):
    optimizer = clipped(optimizer)  # "to be safe": a second clip, at 1.0, before the one given
    opt_state, norms = optimizer.init(params), []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
