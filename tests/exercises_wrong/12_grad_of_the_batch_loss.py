# expect: example_not_a_batch
def per_example_grads(params, x, y):
    return jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(params, x, y)  # loss_fn wants a batch: x[None]
