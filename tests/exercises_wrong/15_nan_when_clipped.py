# expect: not_finite
def clipped(optimizer, max_norm=1.0):
    def update(updates, state, params=None):
        norm = global_norm(updates)
        # "scale down when too big", written with a 0 / 0 where it clips
        scale = jnp.where(norm > max_norm, max_norm / norm * (norm - norm) / (norm - norm), 1.0)
        return jax.tree.map(lambda g: g * scale, updates), state

    return optax.chain(optax.GradientTransformation(lambda params: optax.EmptyState(), update), optimizer)
