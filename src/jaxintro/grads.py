"""Per-example gradients (lesson exercise 2): `vmap(grad)`, a Python loop, and norms without the gradients.

The fast path rests on the structure of a dense layer y = a·W + b. For example i, the gradient of
its loss with respect to W is the outer product a_i ⊗ δ_i, where δ_i is the gradient at the layer's
output, so its Frobenius norm is ‖a_i‖·‖δ_i‖, and the bias gradient's norm is ‖δ_i‖. One ordinary
backward pass over the batch gives every δ_i (each example's loss depends only on its own row), so
the per-example global norms cost about one training step, with no (batch, 784, 256) tensor.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxintro.lesson import cross_entropy, loss_fn
from jaxintro.models.base import Dense, Params


def example_loss(params, apply: Callable, x: Float[Array, " features"], y: Int[Array, ""]) -> Float[Array, ""]:
    """The loss of one example (the model sees a batch of one)."""
    return loss_fn(params, apply, x[None], y[None])


def per_example_grads(params, apply: Callable, x: Float[Array, "batch features"], y: Int[Array, " batch"]):
    """Every example's gradient, stacked along a leading batch axis: `vmap(grad(loss), in_axes=(None, 0, 0))`."""
    grad_fn = jax.grad(functools.partial(_loss_with_apply, apply=apply))
    return jax.vmap(grad_fn, in_axes=(None, 0, 0))(params, x, y)


def _loss_with_apply(params, x, y, *, apply):
    return example_loss(params, apply, x, y)


def global_norms(stacked_grads) -> Float[Array, " batch"]:
    """The global L2 norm of each example's gradient (over all layers, weights and biases)."""
    squares = [jnp.sum(jnp.square(g).reshape(g.shape[0], -1), axis=1) for g in jax.tree.leaves(stacked_grads)]
    return jnp.sqrt(sum(squares))


def per_example_grad_norms_vmap(params, apply: Callable, x, y) -> Float[Array, " batch"]:
    """Per-example gradient norms through `vmap(grad)`: materialises every example's gradient."""
    return global_norms(per_example_grads(params, apply, x, y))


def per_example_grad_norms_fast(dense: Dense, params: Params, x: Float[Array, "batch features"],
                                y: Int[Array, " batch"]) -> Float[Array, " batch"]:
    """Per-example gradient norms of a stack of dense layers (the model's own `Dense`: its layers and activation)
    from activations and output gradients alone."""
    layers = dense.layers(params)

    def forward(probes):
        # A zero "probe" added to each layer's output: its gradient is δ for every example at once.
        inputs, h = [], x
        for k, (w, b) in enumerate(layers):
            inputs.append(h)
            z = h @ w + b + probes[k]
            h = dense.activation(z) if k < len(layers) - 1 else z
        # The sum of per-example losses, so that row i of each δ is example i's own gradient.
        return cross_entropy(h, y) * x.shape[0], inputs

    probes = [jnp.zeros((x.shape[0], b.shape[0]), x.dtype) for _w, b in layers]
    deltas, inputs = jax.grad(forward, has_aux=True)(probes)
    total = jnp.zeros(x.shape[0], x.dtype)
    for a, delta in zip(inputs, deltas):
        delta_sq = jnp.sum(jnp.square(delta), axis=1)
        total = total + jnp.sum(jnp.square(a), axis=1) * delta_sq + delta_sq
    return jnp.sqrt(total)


def per_example_grad_norms_loop(params, apply: Callable, x, y) -> Float[Array, " batch"]:
    """The baseline: a Python loop over examples of a jitted single-example gradient and its norm."""
    one = _jitted_single_norm(apply)
    return jnp.stack([one(params, x[i], y[i]) for i in range(x.shape[0])])


@functools.lru_cache(maxsize=8)
def _jitted_single_norm(apply: Callable) -> Callable:
    def single(params, xi, yi):
        grads = jax.grad(example_loss)(params, apply, xi, yi)
        return jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))

    return jax.jit(single)


def per_example_grad_norms_for(model) -> Callable:
    """The jitted `norms(params, x, y)` for a model: the fast norms where it describes its layers (`model.dense`),
    `vmap(grad)` otherwise."""
    if model.dense is not None:
        return jax.jit(functools.partial(per_example_grad_norms_fast, model.dense))
    return jax.jit(lambda params, x, y: per_example_grad_norms_vmap(params, model.apply, x, y))
