# expect: raised
def set_row(a, i, value):
    mask = jnp.arange(a.shape[0]) == i  # 1-D: it does not broadcast against the rows
    return jnp.where(mask, value, a)
