# expect: negative_index
def set_row(a, i, value):
    i = jnp.clip(i, 0, a.shape[0] - 1)  # "so it never goes out of bounds"
    return a.at[i].set(value)
