# expect: norm_after_clipping
def grad_norm_curve(params, batches, optimizer):
    opt_state = optimizer.init(params)
    norms = []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        norms.append(global_norm(optax.clip_by_global_norm(1.0).update(grads, None)[0]))  # after clipping
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
