"""Core ideas: vmap with the right in_axes, batching a one-example function."""

import jax
import jax.numpy as jnp


def predict(w: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
    """Given: the scores (classes,) of ONE example x (features,), centred on its own mean."""
    return (x - jnp.mean(x)) @ w + b


def batched_predict(w: jax.Array, b: jax.Array, xs: jax.Array) -> jax.Array:
    """The scores (batch, classes) of every row of xs: `predict` mapped over the batch, w and b shared."""
    # >>> solution
    return jax.vmap(predict, in_axes=(None, None, 0))(w, b, xs)  # None: the same w and b for every example
    # <<<
