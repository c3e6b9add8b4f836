# expect: no_batch_axis
def per_example_grads(params, x, y):
    return jax.grad(loss_fn)(params, x, y)  # one gradient for the whole batch
