# expect: item_assignment
def set_row(a, i, value):
    a[i] = value  # NumPy style: JAX arrays cannot change in place
    return a
