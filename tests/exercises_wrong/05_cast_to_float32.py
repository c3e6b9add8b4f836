# expect: dtype_changed
def set_row(a, i, value):
    return a.astype(jnp.float32).at[i].set(value)
