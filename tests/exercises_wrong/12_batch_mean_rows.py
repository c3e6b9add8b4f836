# expect: batch_mean_gradient
def per_example_grads(params, x, y):
    g = jax.grad(loss_fn)(params, x, y)  # the batch's mean, repeated for every example
    return jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (x.shape[0], *leaf.shape)), g)
