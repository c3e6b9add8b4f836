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
    "dropout": """Exercise 1: dropout, with a key split per layer

Add dropout to the 3-layer forward pass. With a key (training), after each hidden ReLU keep every
unit with probability 1 - rate (jax.random.bernoulli) and divide what is kept by (1 - rate)
("inverted" dropout: the expected activation is unchanged, so nothing changes at evaluation).
Each layer needs its own key, split from the one you are given: with the same key both layers
would drop the same units. Without a key (evaluation), no dropout at all.
The same key must give the same masks (it is a pure function); another key, other masks.""",
    "per_example_grads": """Exercise 2: per-example gradients with vmap(grad), and their norms

jax.grad(loss_fn) gives ONE gradient, of the batch's mean loss. To get each example's own gradient,
write the loss of one example (a batch of one: x[None], y[None]), take its jax.grad, and map it over
the batch with jax.vmap: the params are shared (in_axes None), x and y are mapped (in_axes 0).
The result is shaped like params with a leading batch axis on every leaf: the same numbers as a
Python loop of jax.grad over the examples, in one program.
Then grad_norms: each example's global L2 norm, over every layer's w and b together.""",
    "any_depth": """Exercise 3: an MLP of any depth

Write mlp_forward for params with any number of layers ("layer1" ... "layerN", N from 1 up):
ReLU between layers, none after the last. Count the layers with jax.tree.leaves(params) (two
leaves per layer, w and b), then walk them by number: params[f"layer{i}"]. Not in the order
jax.tree.leaves lists them: it sorts dict keys as strings, so "layer10" comes before "layer2"
and a deep MLP would apply its layers shuffled. With three layers it must agree with the
lesson's forward.""",
    "jit_timing": """Exercise 4: jit against no jit, timed honestly

Two traps make JIT timings wrong. The first call of a jitted function traces and compiles it:
time it and you measure the compiler; call f once first (a warm-up). And JAX dispatches work
asynchronously: f(x) returns before the result is computed; stop the clock only after
jax.block_until_ready(result).
Write time_call(f, *args, repeats): mean seconds per call over `repeats` calls, after one warm-up,
each result waited for. Then compare_jit(f, *args, repeats): {"nojit": ..., "jit": ...}, timing f
itself and jax.jit(f) with time_call.""",
    "clipping": """Exercise 5: gradient clipping with optax.chain, and the gradient-norm curve

clip_by_global_norm(max_norm) rescales the whole gradient, all the leaves by one factor, when its
global norm (the norm of every entry together) is above max_norm: the direction is kept, only the
length shrinks; smaller gradients pass unchanged. optax.chain(clip, optimizer) clips first and then
hands the clipped gradient to the optimizer.
Write global_norm(grads), clipped(optimizer, max_norm) and grad_norm_curve(params, batches,
optimizer), which trains one step per batch and returns each step's gradient norm BEFORE clipping,
as one array of shape (steps,) (the curve to plot: how often would the clip act?).""",
    "immutable_update": """Core ideas: arrays are immutable

A JAX array never changes: a[i] = v raises a TypeError. a.at[i].set(v) returns a NEW array with
row (or element) i replaced, and leaves a as it was; under jit XLA often does it in place anyway,
when it can prove nobody needs the old array. .at[i].add(v), .mul(v), .min(v) work the same way.
Write set_row(a, i, value); it must work under jax.jit, with i and value traced, and keep NumPy's
meaning of a negative i (a[-1] is the last row) and a's dtype.""",
    "tree_map": """Core ideas: pytrees and jax.tree.map

Parameters are a pytree: nested dicts, lists and tuples with arrays at the leaves. jax.tree.map(f,
tree1, tree2) calls f on each pair of leaves and rebuilds the same structure, whatever it is.
Write sgd_update(params, grads, lr), a plain gradient-descent step p - lr * g at every leaf, for
ANY structure (not only the lesson's layer dict), returning a new pytree: the params passed in
must not change (a pure function).""",
    "vmap_in_axes": """Core ideas: vmap and in_axes

predict(w, b, x) handles ONE example x of shape (features,). jax.vmap turns it into a function of a
batch: in_axes says, for each argument, which axis is the batch axis, or None when the argument is
the same for every example. Write batched_predict(w, b, xs) with jax.vmap: w and b are shared,
xs is mapped over its rows. (predict centres x on its own mean, so calling it on the whole batch
at once is not the same thing.)""",
    "scan": """Core ideas: a loop as lax.scan

A Python for loop inside a jitted function is unrolled: the program grows with the length.
jax.lax.scan(step, carry, xs) compiles step once and runs it over xs: step(carry, x) returns
(new_carry, output), and scan returns (final_carry, all the outputs stacked).
Write moving_average(xs, decay): m starts at 0, and m_t = decay * m_(t-1) + (1 - decay) * x_t;
return every m_t (shaped like xs). xs holds values or vectors, time on its first axis. It must
work under jit, with decay traced.""",
    "cond": """Core ideas: a branch as lax.cond

Under jit an array is a tracer, an abstract value with a shape and a dtype but no number: a Python
`if x >= 0:` cannot decide and raises TracerBoolConversionError. jax.lax.cond(pred, f_true,
f_false, operand) picks the branch when the program runs. (jnp.where computes both branches and
picks elementwise: fine for values, but a NaN in the branch not taken poisons the gradient.)
Write signed_sqrt(x) for a scalar x: sqrt(x) when x >= 0, else -sqrt(-x).""",
    "split_keys": """Core ideas: PRNG keys

JAX has no hidden random state: every random function takes a key, and the same key always gives
the same numbers. So a key is used once: jax.random.split(key, n) gives n new independent keys,
and after splitting, the old key is not used again. Write noisy_copies(key, x, n): n copies of x,
each plus its own standard normal noise (shape (n, *x.shape)).""",
}

HINTS = {
    "init_params": [
        "He initialisation scales each layer's random weights by sqrt(2 / fan_in), and each layer "
        "needs a key of its own: JAX's randomness is explicit.",
        "keys = jax.random.split(key, len(sizes) - 1) gives one key per layer; zip them with "
        "sizes[:-1] and sizes[1:].",
        "w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in); b = jnp.zeros(fan_out).",
        "Name the layers f\"layer{i + 1}\" (enumerate from 0) and return the dict.",
    ],
    "forward": [
        "A forward pass is a chain of affine maps, with a ReLU between them but not after the last: "
        "the logits can be any real number.",
        "x @ params[\"layer1\"][\"w\"] + params[\"layer1\"][\"b\"] is layer 1 before its ReLU.",
        "jax.nn.relu after layers 1 and 2 only: the last layer returns logits, which may be negative.",
        "Return the logits, not jax.nn.softmax of them: the loss takes care of that.",
    ],
    "loss_fn": [
        "Cross-entropy is minus the mean log-probability of the right class; log_softmax computes "
        "those log-probabilities stably.",
        "log_probs = jax.nn.log_softmax(forward(params, x)) has shape (batch, classes).",
        "Pick each row's label: jnp.take_along_axis(log_probs, y[:, None], axis=1) "
        "(or log_probs[jnp.arange(len(y)), y]).",
        "The loss is minus the mean of those picked values: a scalar.",
    ],
    "train_step": [
        "One step: the loss and its gradient in one pass, then the optimizer turns the gradient into "
        "updates and returns its own new state.",
        "loss, grads = jax.value_and_grad(loss_fn)(params, x, y)",
        "updates, opt_state = optimizer.update(grads, opt_state, params), then "
        "params = optax.apply_updates(params, updates).",
        "Return the NEW opt_state too: Adam's running moments live in it, and the next step needs them.",
    ],
    "dropout": [
        "Dropout zeroes each hidden unit with probability rate and scales the survivors by 1 / (1 - "
        "rate), so the expected value is unchanged; with no key it does nothing.",
        "k1, k2 = jax.random.split(key) when a key is given: one key for each hidden layer.",
        "keep = jax.random.bernoulli(k1, 1.0 - rate, h.shape); h = jnp.where(keep, h / (1.0 - rate), 0.0)",
        "`if key is not None:` is fine under jit: it asks about a Python value (None or not), not an array's value.",
    ],
    "per_example_grads": [
        "A per-example gradient is the gradient of one example's loss: write the loss of one example,"
        " differentiate it, and let vmap map that over the batch.",
        "def example_loss(p, xi, yi): return loss_fn(p, xi[None], yi[None])  # a batch of one",
        "jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y): None = shared, 0 = mapped.",
        "grad_norms: for each leaf g, jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1); add them over the leaves, "
        "then jnp.sqrt.",
    ],
    "any_depth": [
        "A pytree's leaves tell its size: each layer holds two arrays, w and b.",
        "n = len(jax.tree.leaves(params)) // 2 layers; walk them by number, params[f\"layer{i}\"] for i in "
        "1..n. Their leaves' order is a trap: keys sort as strings, \"layer10\" before \"layer2\".",
        "for i in range(1, n): x = jax.nn.relu(x @ params[f\"layer{i}\"][\"w\"] + params[f\"layer{i}\"][\"b\"]); "
        "then layer n alone, without ReLU.",
    ],
    "jit_timing": [
        "The first call of a jitted function compiles it, and a call returns before its result is "
        "ready: an honest timing leaves out the first and waits for each result.",
        "Warm-up: jax.block_until_ready(f(*args)) once before time.perf_counter().",
        "In the loop: jax.block_until_ready(f(*args)) (a result that is ready is returned at once).",
        "Divide the elapsed time by repeats. compare_jit: time_call(f, ...) and time_call(jax.jit(f), ...).",
    ],
    "clipping": [
        "Clipping by the global norm scales the whole gradient by one factor when its norm (over "
        "every leaf) is above the limit; it must happen before the optimizer sees the gradient.",
        "global_norm: jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))) (optax.tree.norm does the same).",
        "clipped: optax.chain(optax.clip_by_global_norm(max_norm), optimizer): the clip first.",
        "grad_norm_curve: grads = jax.grad(loss_fn)(params, x, y); record global_norm(grads) before "
        "optimizer.update, which is where the clipping happens.",
    ],
    "immutable_update": [
        "JAX arrays never change: an update returns a new array, and the old one stays as it was.",
        "a.at[i] selects row i without changing anything; .set(value) returns the updated copy.",
        "return a.at[i].set(value)",
    ],
    "tree_map": [
        "jax.tree.map applies a function leaf by leaf to one or more pytrees of the same structure, "
        "and returns a new pytree.",
        "jax.tree.map(f, params, grads) calls f(p, g) for every pair of leaves.",
        "return jax.tree.map(lambda p, g: p - lr * g, params, grads): no loop over keys, no assignment.",
    ],
    "vmap_in_axes": [
        "vmap needs to know, for each argument, which axis is the batch one, or that there is none "
        "(the argument is shared).",
        "in_axes has one entry per argument of predict: (w, b, x).",
        "jax.vmap(predict, in_axes=(None, None, 0))(w, b, xs): None = the same for every example.",
    ],
    "scan": [
        "lax.scan runs a step function over a sequence; the step takes the carry and one element, and"
        " returns the new carry and one output.",
        "def step(m, x): m = decay * m + (1 - decay) * x; return m, m  # (carry, output)",
        "_, history = jax.lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs); return history",
    ],
    "cond": [
        "Under jit, a Python if cannot ask about a traced value: lax.cond takes the condition and "
        "both branches as functions, and traces both.",
        "jax.lax.cond(x >= 0, lambda v: ..., lambda v: ..., x): the first function runs when the condition holds.",
        "The negative branch: lambda v: -jnp.sqrt(-v).",
    ],
    "split_keys": [
        "Reusing a key gives the same numbers again: split it into as many new keys as draws, and use"
        " each once.",
        "keys = jax.random.split(key, n): one key per copy; do not use `key` itself afterwards.",
        "jax.vmap(lambda k: x + jax.random.normal(k, x.shape))(keys), or a loop over keys and jnp.stack.",
    ],
}

# A hint for one mistake, keyed by the check's key: `hint` shows it first when the last check failed with it.
KEY_HINTS = {
    "per_example_grads": {
        "example_not_a_batch": "vmap runs its function on one example at a time: x has lost its batch axis. The given "
            "loss_fn wants a batch, so differentiate def example_loss(p, xi, yi): return loss_fn(p, xi[None], "
            "yi[None]).",
    },
    "scan": {
        "carry_is_input": "The carry is what the next step receives as m: it must be the new average, not the input"
            " x.",
        "history_shifted": "The second value a step returns is what scan stacks as the output: the new average, not "
            "the old one.",
    },
    "any_depth": {
        "layers_in_string_order": "jax.tree.leaves sorts dict keys as strings: layer10 comes before layer2. Count with it, "
            "then index params[f\"layer{i}\"] by number.",
    },
    "train_step": {
        "opt_state_not_updated": "optimizer.update returns (updates, new_opt_state): return that new state, or Adam starts"
            " from zero at every step.",
    },
    "tree_map": {
        "wrong_sign": "A descent step subtracts lr * g: p + lr * g climbs the gradient.",
    },
    "jit_timing": {
        "no_warmup": "Call f once (and wait for it) before starting the clock: the first call includes "
            "compilation.",
        "no_block_until_ready": "Wait for the result with jax.block_until_ready before stopping the clock: a call returns"
            " before its work is done.",
        "jit_rewrapped": "Wrap f once, jitted = jax.jit(f), and pass that function to time_call: a new jax.jit(f) at "
            "every call is a new function, whose first call takes JAX's slow path.",
    },
    "clipping": {
        "clip_after_optimizer": "In optax.chain, order matters: the clip comes first, so the optimizer sees the clipped "
            "gradient.",
    },
    "dropout": {
        "keep_is_rate": "jax.random.bernoulli(k, p) is True with probability p: for dropout, p is the probability"
            " to KEEP, 1 - rate.",
        "key_reused": "Split the key: each hidden layer's mask needs a key of its own.",
    },
    "split_keys": {
        "key_reused": "jax.random.split(key, n) gives n new keys; each draw takes one of them.",
    },
    "loss_fn": {
        "unstable_log_softmax": "jnp.log(jax.nn.softmax(z)) gives -inf for a large logit gap: jax.nn.log_softmax(z) is "
            "the stable form.",
    },
}
