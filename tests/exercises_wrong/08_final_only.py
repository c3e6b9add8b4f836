# expect: returns_final_only
def moving_average(xs, decay):
    def step(m, x):
        m = decay * m + (1.0 - decay) * x
        return m, m

    return jax.lax.scan(step, jnp.zeros((), xs.dtype), xs)[0]
