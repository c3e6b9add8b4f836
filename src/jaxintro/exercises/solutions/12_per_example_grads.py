"""Exercise 2: per-example gradients with vmap(grad), and their norms."""

import jax
import jax.numpy as jnp


def forward(params: dict, x: jax.Array) -> jax.Array:
    """Given: logits of the 3-layer MLP."""
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    """Given: mean cross-entropy of a batch x (batch, features), y (batch,)."""
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


def per_example_grads(params: dict, x: jax.Array, y: jax.Array) -> dict:
    """Each example's gradient of its own loss: shaped like params, with a leading batch axis on every leaf."""
    # >>> solution
    def example_loss(p, xi, yi):
        return loss_fn(p, xi[None], yi[None])  # a batch of one

    return jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y)  # params shared, x and y mapped
    # <<<


def grad_norms(grads: dict) -> jax.Array:
    """The global L2 norm of each example's gradient (over every layer, w and b): shape (batch,)."""
    # >>> solution
    squares = [jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads)]
    return jnp.sqrt(sum(squares))
    # <<<
