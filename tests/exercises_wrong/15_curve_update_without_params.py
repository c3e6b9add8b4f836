# expect: raised
def grad_norm_curve(params, batches, optimizer):
    opt_state, norms = optimizer.init(params), []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, opt_state = optimizer.update(grads, opt_state)  # AdamW needs the params here
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
