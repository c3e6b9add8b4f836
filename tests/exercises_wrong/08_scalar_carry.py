# expect: vectors
def moving_average(xs, decay):
    def step(m, x):
        m = decay * m + (1.0 - decay) * x
        return m, m

    return jax.lax.scan(step, 0.0, xs)[1]  # a number as the carry: right for values, a TypeError for vectors
