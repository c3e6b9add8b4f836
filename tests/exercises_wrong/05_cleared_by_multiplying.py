# expect: not_replaced
def set_row(a, i, value):
    return a.at[i].multiply(0).at[i].add(value)  # clear the row, then add: inf * 0 is NaN
