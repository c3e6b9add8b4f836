# expect: mismatch
def grad_norm_curve(params, batches, optimizer):
    norms = []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
