# expect: mismatch
def grad_norm_curve(params, batches, optimizer):
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05))
    opt_state = tx.init(params)
    norms = []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
