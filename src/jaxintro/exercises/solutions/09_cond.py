"""Core ideas: a branch on a value as lax.cond (a Python `if` cannot see a traced value)."""

import jax
import jax.numpy as jnp


def signed_sqrt(x: jax.Array) -> jax.Array:
    """sqrt(x) when x >= 0, else -sqrt(-x), for a scalar x; must work under jax.jit."""
    # >>> solution
    return jax.lax.cond(x >= 0, lambda v: jnp.sqrt(v), lambda v: -jnp.sqrt(-v), x)
    # <<<
