# expect: carry_is_input
def moving_average(xs, decay):
    def step(m, x):
        m_new = decay * m + (1.0 - decay) * x
        return x, m_new  # carries the input, not the running average

    return jax.lax.scan(step, jnp.zeros((), xs.dtype), xs)[1]
