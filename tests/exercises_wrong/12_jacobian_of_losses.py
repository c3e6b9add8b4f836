# expect: work_grows_quadratically
def per_example_grads(params, x, y):
    def losses(p):  # every example's loss, as a vector
        log_probs = jax.nn.log_softmax(forward(p, x))
        return -jnp.take_along_axis(log_probs, y[:, None], axis=1)[:, 0]
    return jax.jacrev(losses)(params)  # row i: d loss_i / d params, through the whole batch
