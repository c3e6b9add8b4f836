# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: jaxintro (.venv)
#     language: python
#     name: jaxintro
# ---

# %% [markdown]
# # Introduction to JAX
#
# The lesson, as cells you can run and change. JAX is NumPy that can be *transformed*: `grad`
# differentiates a function, `jit` compiles it, `vmap` batches it, and the three compose. Each
# section below runs one idea and prints what it gives; then we build the lesson's MLP step by step
# and train it on MNIST.
#
# This notebook is generated from `notebooks/introduction_to_jax.py` (`make notebooks`); the test
# suite runs it from top to bottom, with a few epochs on a subset, and checks every number it prints.
# ([Versión en español](introduccion_a_jax.ipynb).)

# %% [markdown]
# The parameters of the training run. The defaults are the lesson's; the test suite replaces this
# cell's values with small ones so the whole notebook runs in seconds.

# %% tags=["parameters"]
EPOCHS = 5  # passes over the training set
TRAIN_SIZE = None  # None: every training image; a number N: only the first N (a quicker run)
BATCH_SIZE = 128
DATASET = "auto"  # "auto": MNIST when found or downloadable, else scikit-learn's 8x8 digits
DATA_DIR = None  # a folder with MNIST's four IDX files; None: $JAXINTRO_DATA_DIR, the cache, then a download
SEED = 0

# %%
import functools
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import optax
import orbax.checkpoint as ocp

from jaxintro.data import load_dataset
from jaxintro.models import mlp
from jaxintro.lesson import cross_entropy, scale_images
from jaxintro.lesson import train_step as jaxintro_train_step

print("jax", jax.__version__, "optax", optax.__version__, "on", jax.devices()[0].platform)

# %% [markdown]
# ## 1. Pure functions
#
# JAX's transformations work on *pure* functions: the output depends only on the inputs, and
# nothing outside changes. The reason shows up as soon as we compile. `jax.jit` runs the Python
# body once, with abstract stand-ins (tracers) for the arguments, records the operations, and from
# then on runs the recorded program. A `print` inside is a side effect, so it happens only during
# that first trace:

# %%
def add_one(x):
    print("  tracing add_one with x =", x)
    return x + 1.0


jitted_add_one = jax.jit(add_one)
print("jitted_add_one(1.0) =", jitted_add_one(1.0))
print("jitted_add_one(2.0) =", jitted_add_one(2.0))

# %% [markdown]
# The second call printed nothing: Python did not run again. A global variable is the same trap
# in disguise. Its value is read while tracing and baked into the program as a constant:

# %%
scale = 2.0


def times_scale(x):
    return x * scale


jitted_times_scale = jax.jit(times_scale)
print("scale = 2.0:  jitted_times_scale(3.0) =", jitted_times_scale(3.0))
scale = 10.0
print("scale = 10.0: jitted_times_scale(3.0) =", jitted_times_scale(3.0))
print("scale = 10.0: times_scale(3.0) =", times_scale(3.0))

# %% [markdown]
# The compiled function still multiplies by 2. Pass what a function needs as arguments, and it
# will mean the same thing compiled or not.
#
# ## 2. `jax.numpy` and immutable arrays
#
# `jax.numpy` mirrors NumPy's API, with two differences worth knowing from the start: the default
# float is 32-bit, and arrays cannot be changed in place.

# %%
import numpy as np

x = jnp.arange(5.0)
print("x =", x, x.dtype)
print("NumPy's default:", np.arange(5.0).dtype)
try:
    x[0] = 10.0
except TypeError as error:
    print("TypeError:", str(error).splitlines()[0])

# %% [markdown]
# Instead of writing into `x`, `x.at[index]` describes a change and returns a *new* array. Inside
# `jit`, XLA turns this into an in-place update whenever the old array is no longer needed, so
# nothing is lost in speed.

# %%
y = x.at[0].set(10.0)
z = x.at[1:3].add(100.0)
print("x.at[0].set(10.0)   ->", y)
print("x.at[1:3].add(100.0) ->", z)
print("x is unchanged:       ", x)

# %% [markdown]
# ## 3. `grad` and its compositions
#
# `jax.grad(f)` is a new function: the derivative of `f`. For f(x) = x², f'(x) = 2x and f''(x) = 2:

# %%
def f(x):
    return x**2


print("f(3.0) =", f(3.0))
print("grad(f)(3.0) =", jax.grad(f)(3.0))
print("grad(grad(f))(3.0) =", jax.grad(jax.grad(f))(3.0))

# %% [markdown]
# By default `grad` differentiates with respect to the first argument; `argnums` picks others.
# `value_and_grad` returns the value as well, which a training step needs (the loss to report, the
# gradient to step with). For g(x, y) = x·y + sin x: ∂g/∂x = y + cos x and ∂g/∂y = x.

# %%
def g(x, y):
    return x * y + jnp.sin(x)


dg_dx, dg_dy = jax.grad(g, argnums=(0, 1))(0.0, 2.0)
print("at (0, 2): dg/dx =", dg_dx, " dg/dy =", dg_dy)
value, slope = jax.value_and_grad(f)(3.0)
print("value_and_grad(f)(3.0) =", (float(value), float(slope)))

# %% [markdown]
# Transformations compose because each one takes a function and returns a function: compile the
# derivative, or evaluate it at many points at once.

# %%
points = jnp.array([0.0, 1.0, 2.0, 3.0])
print("jit(grad(f))(3.0) =", jax.jit(jax.grad(f))(3.0))
print("vmap(grad(f))(points) =", jax.vmap(jax.grad(f))(points))

# %% [markdown]
# ## 4. `jit`, and what it traces: the jaxpr
#
# What `jit` records while tracing is a *jaxpr*, JAX's small intermediate language: typed inputs,
# a list of primitive operations, outputs. `jax.make_jaxpr` shows it. Here is one dense layer:

# %%
def dense(w, b, x):
    return jnp.tanh(x @ w + b)


w = jnp.ones((3, 2))
b = jnp.zeros(2)
batch_x = jnp.ones((4, 3))
jaxpr = jax.make_jaxpr(dense)(w, b, batch_x)
print(jaxpr)
print("primitives:", sorted({eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}))

# %% [markdown]
# The matrix product became `dot_general`, and the shapes are part of the program. So a new shape
# means a new trace (and a new compilation), while new values of the same shape reuse the program:

# %%
traced_shapes = []


@jax.jit
def double(x):
    traced_shapes.append(x.shape)  # a side effect: runs only while tracing
    return 2 * x


for _ in range(3):
    double(jnp.ones(3))
double(jnp.ones(4))
print("calls: 4, traces:", len(traced_shapes), traced_shapes)

# %% [markdown]
# While tracing, `x` has a shape but no value, so a Python `if` on it cannot be decided. JAX says
# so with an error; `jnp.where` (or `lax.cond`) keeps the choice inside the program:

# %%
def relu_with_if(x):
    if x > 0:
        return x
    return 0.0


try:
    jax.jit(relu_with_if)(1.0)
except jax.errors.TracerBoolConversionError as error:
    print(type(error).__name__)
relu_with_where = jax.jit(lambda x: jnp.where(x > 0, x, 0.0))
print("relu_with_where(-2.0) =", relu_with_where(-2.0), " relu_with_where(3.0) =", relu_with_where(3.0))

# %% [markdown]
# ## 5. `vmap`, and per-example gradients
#
# Write a function for *one* example, and `jax.vmap` makes it work on a batch. `in_axes` says which
# arguments carry the batch axis (`0`) and which are shared (`None`):

# %%
def predict(w, b, x):
    return jnp.dot(x, w) + b


w = jnp.array([1.0, -2.0, 0.5])
b = 0.1
batch_x = jnp.arange(12.0).reshape(4, 3)
batch_y = jnp.array([1.0, 0.0, -1.0, 2.0])
batched_predict = jax.vmap(predict, in_axes=(None, None, 0))
print("batched_predict(w, b, batch_x) =", batched_predict(w, b, batch_x))
print("equals batch_x @ w + b:", bool(jnp.allclose(batched_predict(w, b, batch_x), batch_x @ w + b)))

# %% [markdown]
# The same trick gives what a plain `grad` of a batch loss cannot: one gradient *per example*
# (needed to clip each example's gradient in differentially private training, or to see which
# examples pull hardest). `vmap(grad(loss))` is the whole recipe:

# %%
def example_loss(w, x, y):
    return (jnp.dot(x, w) - y) ** 2


def batch_loss(w, xs, ys):
    return jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0))(w, xs, ys))


per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(w, batch_x, batch_y)
by_hand = 2 * (batch_x @ w - batch_y)[:, None] * batch_x
print("per-example gradients:", per_example.shape)
print("equal to 2 (x·w - y) x by hand:", bool(jnp.allclose(per_example, by_hand)))
batch_grad = jax.grad(batch_loss)(w, batch_x, batch_y)
print("their mean equals the batch gradient:", bool(jnp.allclose(per_example.mean(axis=0), batch_grad)))

# %% [markdown]
# `jaxintro grads` does this for the lesson's MLP (exercise 2) and compares it with a Python loop.
#
# ## 6. Pytrees
#
# Parameters are not one array but a nest of them: a dict of layers, each a dict of weights and
# biases. JAX calls any such nest of lists, tuples and dicts a *pytree*, and every transformation
# accepts one. `jax.tree.map` applies a function to every leaf, which is how an update touches all
# parameters at once:

# %%
tree = {
    "layer1": {"w": jnp.ones((784, 256)), "b": jnp.zeros(256)},
    "layer2": {"w": jnp.ones((256, 10)), "b": jnp.zeros(10)},
}
print(jax.tree.map(jnp.shape, tree))
leaves = jax.tree.leaves(tree)
print("leaves:", len(leaves), " scalars:", sum(leaf.size for leaf in leaves))
grads = jax.tree.map(jnp.ones_like, tree)
stepped = jax.tree.map(lambda p, g: p - 0.1 * g, tree, grads)
print("one SGD step, lr 0.1: layer1 w[0, 0] =", stepped["layer1"]["w"][0, 0])

# %% [markdown]
# ## 7. Random numbers: keys, split, never reused
#
# NumPy keeps a hidden global random state; a pure function cannot. In JAX, randomness comes from
# an explicit *key*: the same key always gives the same numbers. To get new numbers, split the key
# and use each piece once.

# %%
key = jax.random.key(SEED)
a = jax.random.normal(key, (3,))
b = jax.random.normal(key, (3,))
print("same key, same numbers:", bool(jnp.array_equal(a, b)))
key, subkey = jax.random.split(key)
c = jax.random.normal(subkey, (3,))
print("a split-off key, other numbers:", not bool(jnp.array_equal(a, c)))
print("three keys at once:", jax.random.split(key, 3).shape)

# %% [markdown]
# ## 8. The MLP, step by step
#
# Now the lesson's model: an MLP 784-256-128-10 with ReLU, trained with Adam on MNIST. First the
# data. `load_dataset` is jaxintro's loader (the one `jaxintro train` uses): pixels stay `uint8`
# and are scaled to [0, 1] inside the step.

# %%
data = load_dataset(DATASET, DATA_DIR)
x_train, y_train = data.x_train[:TRAIN_SIZE], data.y_train[:TRAIN_SIZE]
print(f"{data.name}: {len(x_train)} training and {len(data.x_test)} test images of {data.num_features} pixels")
print("from:", data.source)

fig, axes = plt.subplots(1, 8, figsize=(8, 1.4))
for ax, image, label in zip(axes, x_train, y_train):
    ax.imshow(image.reshape(data.image_shape), cmap="gray")
    ax.set_title(str(label))
    ax.axis("off")
plt.show()

# %% [markdown]
# **Initialisation.** He initialisation draws each weight from N(0, 2/fan_in), which keeps the
# signal's scale steady through ReLU layers; biases start at zero. One key is split into one per
# layer, and another is kept for shuffling.

# %%
def init_layer(key, fan_in, fan_out):
    w = jax.random.normal(key, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
    return {"w": w, "b": jnp.zeros(fan_out)}


def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return {
        f"layer{i + 1}": init_layer(k, fan_in, fan_out)
        for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:]))
    }


init_key, shuffle_key = jax.random.split(jax.random.key(SEED))
sizes = (data.num_features, 256, 128, data.num_classes)
params = init_params(init_key, sizes)
print(jax.tree.map(jnp.shape, params))
print("parameters:", sum(p.size for p in jax.tree.leaves(params)))
print(f"std of layer1 w: {float(params['layer1']['w'].std()):.4f}, sqrt(2 / fan_in) = {(2 / sizes[0]) ** 0.5:.4f}")

# %% [markdown]
# **Forward pass.** Two hidden layers with ReLU, and a last layer that returns *logits*: one score
# per class, not yet probabilities.

# %%
def forward(params, x):
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]


x_batch, y_batch = x_train[:BATCH_SIZE], y_train[:BATCH_SIZE]
logits = forward(params, scale_images(x_batch))
print("logits:", logits.shape)
package_logits = mlp.mlp_forward(params, scale_images(x_batch))
print("same as jaxintro's mlp_forward:", bool(jnp.allclose(logits, package_logits, atol=1e-5)))

# %% [markdown]
# **Loss.** Cross-entropy from `log_softmax`, which subtracts the largest logit before
# exponentiating, so large logits cannot overflow. Before training, every class is about equally
# likely, and the loss is near ln 10 ≈ 2.30.

# %%
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(log_probs[jnp.arange(len(y)), y])


loss_before = loss_fn(params, scale_images(x_batch), y_batch)
print(f"loss before training: {float(loss_before):.4f}")
print("same as jaxintro's cross_entropy:", bool(jnp.allclose(loss_before, cross_entropy(logits, y_batch))))

# %% [markdown]
# **One training step.** `value_and_grad` gives the loss and its gradient with respect to every
# parameter (a pytree shaped like `params`); Optax's Adam turns the gradient into updates and
# carries its own state (the moment estimates). The optimizer is bound with `functools.partial`
# before `jit`, so the compiled step reads no global.

# %%
def train_step(params, opt_state, x_u8, y, *, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, scale_images(x_u8), y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


adam = optax.adam(1e-3)
step = jax.jit(functools.partial(train_step, optimizer=adam))
stepped_params, _, loss = step(params, adam.init(params), x_batch, y_batch)
loss_after = loss_fn(stepped_params, scale_images(x_batch), y_batch)
print(f"loss of the first batch: {float(loss):.4f}, after one step: {float(loss_after):.4f}")

# %% [markdown]
# `jaxintro train` runs this very step (`jaxintro.lesson.train_step`, which also counts correct
# predictions). One step of each, from the same start, lands on the same parameters:

# %%
package_step = jax.jit(functools.partial(jaxintro_train_step, model=mlp.build(sizes), tx=adam))
package_params, _, metrics = package_step(params, adam.init(params), (x_batch, y_batch), None)
print("same parameters as jaxintro.lesson.train_step:",
      jax.tree.all(jax.tree.map(lambda p, q: jnp.allclose(p, q, atol=1e-6), stepped_params, package_params)))

# %% [markdown]
# **Training.** Each epoch draws a new permutation from a fresh key, cuts it into batches of 128
# (dropping the last partial batch), and runs the compiled step on each; then the whole test set
# is scored. Each epoch prints a line in the lesson's style: the mean training loss, then the test
# accuracy.

# %%
x_train_device, y_train_device = jnp.asarray(x_train), jnp.asarray(y_train)
x_test, y_test = jnp.asarray(data.x_test), jnp.asarray(data.y_test)


@jax.jit
def accuracy(params, x_u8, y):
    return jnp.mean(jnp.argmax(forward(params, scale_images(x_u8)), axis=-1) == y)


def train(params, optimizer, key, epochs):
    step = jax.jit(functools.partial(train_step, optimizer=optimizer))
    opt_state = optimizer.init(params)
    steps = len(x_train_device) // BATCH_SIZE
    history = []
    for epoch in range(1, epochs + 1):
        key, perm_key = jax.random.split(key)
        perm = jax.random.permutation(perm_key, len(x_train_device))[: steps * BATCH_SIZE]
        losses = []
        for idx in perm.reshape(steps, BATCH_SIZE):
            params, opt_state, loss = step(params, opt_state, x_train_device[idx], y_train_device[idx])
            losses.append(loss)
        history.append((float(jnp.mean(jnp.stack(losses))), float(accuracy(params, x_test, y_test))))
        print(f"Epoch {epoch:3d} | Loss: {history[-1][0]:.4f} | Test Acc: {history[-1][1]:.4f}")
    return params, history


params, history = train(params, adam, shuffle_key, EPOCHS)

# %%
epochs = range(1, len(history) + 1)
fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(9, 3))
loss_ax.plot(epochs, [loss for loss, _ in history], marker="o")
loss_ax.set(xlabel="epoch", ylabel="training loss")
acc_ax.plot(epochs, [acc for _, acc in history], marker="o", color="tab:green")
acc_ax.set(xlabel="epoch", ylabel="test accuracy")
plt.show()

# %% [markdown]
# What the trained model says about the first test images (the title is the prediction, red when
# it is wrong):

# %%
predictions = jnp.argmax(forward(params, scale_images(x_test[:8])), axis=-1)
fig, axes = plt.subplots(1, 8, figsize=(8, 1.4))
for ax, image, label, guess in zip(axes, data.x_test, data.y_test, predictions):
    ax.imshow(image.reshape(data.image_shape), cmap="gray")
    ax.set_title(str(int(guess)), color="black" if guess == label else "red")
    ax.axis("off")
plt.show()
print("predictions:", predictions.tolist())
print("labels:     ", data.y_test[:8].tolist())

# %% [markdown]
# ## 9. Optax chains
#
# An Optax optimizer is a chain of gradient transformations. Clipping the gradient's global norm
# before Adam guards against a rare huge gradient, and a schedule makes the learning rate a
# function of the step: here a linear warm-up, then a cosine decay.

# %%
total_steps = EPOCHS * (len(x_train) // BATCH_SIZE)
warmup_steps = max(1, total_steps // 10)
schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0, peak_value=1e-3, warmup_steps=warmup_steps, decay_steps=total_steps, end_value=1e-5)
for at in (0, warmup_steps, total_steps):
    print(f"learning rate at step {at}: {float(schedule(at)):.2e}")

clip = optax.clip_by_global_norm(1.0)
huge = jax.tree.map(lambda p: jnp.full_like(p, 100.0), params)
clipped, _ = clip.update(huge, clip.init(params))
print(f"global norm before clipping: {float(optax.tree.norm(huge)):.1f},",
      f"after: {float(optax.tree.norm(clipped)):.4f}")

# %% [markdown]
# The chain is an optimizer like any other, so the same `train` runs it, from the same start:

# %%
chained = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))
chained_params, chained_history = train(init_params(init_key, sizes), chained, shuffle_key, EPOCHS)

# %% [markdown]
# `jaxintro train --clip-norm 1.0 --schedule warmup-cosine` builds this chain (see `jaxintro/optim.py`),
# and `jaxintro experiment clipping` is the lesson's exercise 5.
#
# ## 10. A checkpoint with Orbax
#
# Parameters are a pytree of arrays, and Orbax saves pytrees. `StandardCheckpointer` writes in
# the background (`wait_until_finished` waits for it), and restores into the shapes and dtypes we
# give it. Here the checkpoint goes into a temporary folder, removed at the end of the cell.

# %%
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "params"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, params)
    checkpointer.wait_until_finished()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
    restored = checkpointer.restore(path, abstract)
    checkpointer.close()

print("restored equals saved:", jax.tree.all(jax.tree.map(jnp.array_equal, params, restored)))
print(f"test accuracy of the restored parameters: {float(accuracy(restored, x_test, y_test)):.4f}")

# %% [markdown]
# `jaxintro train` saves the whole training state (parameters, Adam's state, the key) at every
# epoch's end with an Orbax `CheckpointManager`, and `jaxintro train --resume` continues from it.
#
# ## 11. What next
#
# - `jaxintro exercises`: the lesson's exercises, with checks that say what to look at.
# - `jaxintro tour`: every idea above in the terminal, with more detail (`--section trace` shows the
#   jaxpr of the lesson's loss, `--section derivatives` Jacobians and a Hessian).
# - `jaxintro train`: this training, compiled as one program per epoch; `--model linen|nnx|equinox`
#   trains the same MLP written with Flax or Equinox, and `--seeds 8` eight of them at once.
# - `jaxintro grads`, `jaxintro experiment dropout|models|clipping`, `jaxintro bench`: exercises 1
#   to 5; `jaxintro serve` draws a digit and shows what the trained model sees.
# - Everything with `--help`; `jaxintro --lang es ...` speaks Spanish.
