# expect: clip_after_optimizer
def clipped(optimizer, max_norm=1.0):
    return optax.chain(optimizer, optax.clip_by_global_norm(max_norm))
