"""Core ideas: arrays are immutable; `.at[i].set(v)` returns an updated copy."""

import jax
import jax.numpy as jnp


def set_row(a: jax.Array, i: int, value: float) -> jax.Array:
    """A copy of `a` whose row (or element) `i` is `value`; `a` itself stays as it was."""
    # >>> solution
    return a.at[i].set(value)  # a new array: JAX arrays cannot change in place
    # <<<
