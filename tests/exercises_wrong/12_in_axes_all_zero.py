# expect: in_axes_params_batched
def per_example_grads(params, x, y):
    def example_loss(p, xi, yi):
        return loss_fn(p, xi[None], yi[None])

    return jax.vmap(jax.grad(example_loss), in_axes=(0, 0, 0))(params, x, y)
