"""Core ideas: PRNG keys are split, and each key is used once."""

import jax
import jax.numpy as jnp


def noisy_copies(key: jax.Array, x: jax.Array, n: int) -> jax.Array:
    """n copies of x (shape (n, *x.shape)), each plus its own standard normal noise."""
    # >>> solution
    keys = jax.random.split(key, n)  # n new keys; `key` itself is not used again
    return jax.vmap(lambda k: x + jax.random.normal(k, x.shape))(keys)
    # <<<
