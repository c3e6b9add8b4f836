# expect: python_loop
def moving_average(xs, decay):
    m, out = 0.0, jnp.zeros_like(xs)
    for t in range(xs.shape[0]):
        m = decay * m + (1.0 - decay) * xs[t]
        out = out.at[t].set(m)
    return out
