# expect: optimizer_ignored
def clipped(optimizer, max_norm=1.0):
    return optax.chain(optax.clip_by_global_norm(max_norm), optax.sgd(1.0))  # not the optimizer given
