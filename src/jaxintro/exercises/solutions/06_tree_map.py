"""Core ideas: a pytree update with jax.tree.map, for any nesting of dicts, lists and tuples."""

import jax


def sgd_update(params, grads, lr: float):
    """A new pytree shaped like `params`: every leaf p becomes p - lr * g; `params` is not changed."""
    # >>> solution
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)
    # <<<
