# expect: clipped_per_leaf
def clipped(optimizer, max_norm=1.0):
    def clip_leaves(grads):  # each leaf to norm max_norm on its own: the direction changes
        return jax.tree.map(lambda g: g * jnp.minimum(1.0, max_norm / (jnp.linalg.norm(g) + 1e-12)), grads)

    clip = optax.stateless(lambda updates, params=None: clip_leaves(updates))
    return optax.chain(clip, optimizer)
