"""Statements and hints in English (the docstrings are the solution files' own)."""

STATEMENTS = {
    "init_params": """Build it, step 1: init_params

The MLP is a dict of layers, {"layer1": {"w": ..., "b": ...}, "layer2": ..., ...}, one layer
between each pair of consecutive sizes: sizes=(784, 256, 128, 10) gives three layers, w of shape
(fan_in, fan_out) and b of shape (fan_out,).

Write init_params(key, sizes):
- split the key, one new key per layer (JAX has no global random state: a key is used once);
- weights from jax.random.normal, scaled by sqrt(2 / fan_in) (He init: it keeps the variance of
  the signal through ReLU layers; without it the activations shrink or blow up with depth);
- biases at zero.""",
    "forward": """Build it, step 2: forward

The forward pass of the lesson's 3-layer MLP on a batch x of shape (batch, features):
  h1 = relu(x @ w1 + b1),  h2 = relu(h1 @ w2 + b2),  logits = h2 @ w3 + b3.
No ReLU after the last layer: logits are any real numbers, the loss turns them into
probabilities. A pure function: it only reads params and x, and works under jax.jit.""",
    "loss_fn": """Build it, step 3: loss_fn

The mean cross-entropy of the batch: for each example, minus the log-probability the model gives
its label, averaged over the batch. Take the log-probabilities with jax.nn.log_softmax(logits),
not jnp.log(jax.nn.softmax(logits)): softmax rounds tiny probabilities to 0 and log(0) = -inf,
while log_softmax computes logits - logsumexp(logits) directly and stays finite.
y holds integer labels, shape (batch,).""",
    "train_step": """Build it, step 4: train_step

One training step, compiled: jax.value_and_grad(loss_fn) gives the loss and the gradient in one
pass; optimizer.update turns the gradient into updates (Adam keeps its moments in opt_state);
optax.apply_updates adds them to the params. Return (new params, new opt_state, loss), the loss
measured before the step. Nothing is changed in place: the new state is returned.
@jax.jit above it compiles the whole step into one XLA program.""",
}

HINTS = {
    "init_params": [
        "keys = jax.random.split(key, len(sizes) - 1) gives one key per layer; zip them with "
        "sizes[:-1] and sizes[1:].",
        "w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in); b = jnp.zeros(fan_out).",
        "Name the layers f\"layer{i + 1}\" (enumerate from 0) and return the dict.",
    ],
    "forward": [
        "x @ params[\"layer1\"][\"w\"] + params[\"layer1\"][\"b\"] is layer 1 before its ReLU.",
        "jax.nn.relu after layers 1 and 2 only: the last layer returns logits, which may be negative.",
        "Return the logits, not jax.nn.softmax of them: the loss takes care of that.",
    ],
    "loss_fn": [
        "log_probs = jax.nn.log_softmax(forward(params, x)) has shape (batch, classes).",
        "Pick each row's label: jnp.take_along_axis(log_probs, y[:, None], axis=1) "
        "(or log_probs[jnp.arange(len(y)), y]).",
        "The loss is minus the mean of those picked values: a scalar.",
    ],
    "train_step": [
        "loss, grads = jax.value_and_grad(loss_fn)(params, x, y)",
        "updates, opt_state = optimizer.update(grads, opt_state, params), then "
        "params = optax.apply_updates(params, updates).",
        "Return the NEW opt_state too: Adam's running moments live in it, and the next step needs them.",
    ],
}
