# expect: python_loop
def per_example_grads(params, x, y):
    grads = [jax.grad(loss_fn)(params, x[i:i + 1], y[i:i + 1]) for i in range(x.shape[0])]
    return jax.tree.map(lambda *g: jnp.stack(g), *grads)
