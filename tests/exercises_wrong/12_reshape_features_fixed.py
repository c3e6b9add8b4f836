# expect: raised
def per_example_grads(params, x, y):
    def example_loss(p, xi, yi):
        return loss_fn(p, xi.reshape(1, 5), yi.reshape(1))
    return jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y)
