# expect: loop_not_vmap
def per_example_grads(params, x, y):
    grad = jax.grad(lambda p, xi, yi: loss_fn(p, xi[None], yi[None]))
    return jax.lax.map(lambda xy: grad(params, *xy), (x, y))
