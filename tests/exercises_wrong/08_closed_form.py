# expect: scan_missing
def moving_average(xs, decay):
    t = jnp.arange(xs.shape[0])
    # m_t = (1 - decay) * sum_k decay^(t - k) x_k, without a loop: decay^-k overflows for long inputs
    return (1 - decay) * decay ** t * jnp.cumsum(xs * decay ** (-t))
