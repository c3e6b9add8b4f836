# expect: clipped_elementwise
def clipped(optimizer, max_norm=1.0):
    return optax.chain(optax.clip(max_norm), optimizer)  # each entry on its own
