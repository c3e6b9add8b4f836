"""Build it, step 3: the loss, a mean cross-entropy through log-softmax."""

import jax
import jax.numpy as jnp


def forward(params: dict, x: jax.Array) -> jax.Array:
    """Step 2, given: logits of the 3-layer MLP."""
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    """The mean over the batch of -log p(label), a scalar; y holds integer labels."""
    # >>> solution
    log_probs = jax.nn.log_softmax(forward(params, x))  # stable: never takes the log of a rounded-to-0 probability
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))
    # <<<
