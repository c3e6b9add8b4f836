# expect: history_shifted
def moving_average(xs, decay):
    def step(m, x):
        return decay * m + (1.0 - decay) * x, m  # outputs the old carry

    return jax.lax.scan(step, jnp.zeros((), xs.dtype), xs)[1]
