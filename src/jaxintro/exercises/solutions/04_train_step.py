"""Build it, step 4: one training step with value_and_grad and Optax, compiled with jit."""

import jax
import jax.numpy as jnp
import optax


def forward(params: dict, x: jax.Array) -> jax.Array:
    """Step 2, given: logits of the 3-layer MLP."""
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    """Step 3, given: mean cross-entropy."""
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


optimizer = optax.adam(1e-3)


@jax.jit
def train_step(params: dict, opt_state: optax.OptState, x: jax.Array, y: jax.Array) -> tuple:
    """(new params, new optimizer state, the loss before the step)."""
    # >>> solution
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # one pass gives both
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss
    # <<<
