# expect: add_not_set
def set_row(a, i, value):
    return a.at[i].add(value)
