# expect: wrong_index
def set_row(a, i, value):
    return a.at[0].set(value)
