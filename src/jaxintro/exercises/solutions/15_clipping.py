"""Exercise 5: gradient clipping with optax.chain, and the curve of gradient norms."""

import jax
import jax.numpy as jnp
import optax


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    """Given: a linear model's mean squared error."""
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def global_norm(grads) -> jax.Array:
    """The L2 norm of all the leaves of `grads` together: sqrt of the sum of every squared entry."""
    # >>> solution
    return jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads)))
    # <<<


def clipped(optimizer: optax.GradientTransformation, max_norm: float = 1.0) -> optax.GradientTransformation:
    """`optimizer`, fed gradients whose global norm is clipped to max_norm first."""
    # >>> solution
    return optax.chain(optax.clip_by_global_norm(max_norm), optimizer)  # clip, then the optimizer
    # <<<


def grad_norm_curve(params: dict, batches: list, optimizer: optax.GradientTransformation) -> jax.Array:
    """Train one step per (x, y) in batches; return each step's gradient global norm, before clipping."""
    # >>> solution
    opt_state = optimizer.init(params)
    norms = []
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        norms.append(global_norm(grads))  # the raw gradient: what clipping will act on
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return jnp.stack(norms)
    # <<<
