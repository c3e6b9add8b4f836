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
# # Introducción a JAX
#
# La lección, en celdas que se pueden ejecutar y cambiar. JAX es NumPy que se puede *transformar*:
# `grad` deriva una función, `jit` la compila, `vmap` la vectoriza sobre un lote, y las tres se
# combinan entre sí. Cada sección ejecuta una idea y muestra lo que da; después construimos paso a
# paso el MLP de la lección y lo entrenamos con MNIST.
#
# Este cuaderno se genera a partir de `notebooks/introduccion_a_jax.py` (`make notebooks`); la
# batería de pruebas lo ejecuta de principio a fin, con pocas épocas sobre un subconjunto, y
# comprueba cada número que imprime. ([English version](introduction_to_jax.ipynb).)

# %% [markdown]
# Los parámetros del entrenamiento. Los valores por defecto son los de la lección; las pruebas
# sustituyen los de esta celda por otros pequeños para que el cuaderno entero tarde segundos.

# %% tags=["parameters"]
EPOCHS = 5  # pasadas por el conjunto de entrenamiento
TRAIN_SIZE = None  # None: todas las imágenes de entrenamiento; un número N: solo las N primeras (más rápido)
BATCH_SIZE = 128
DATASET = "auto"  # "auto": MNIST si se encuentra o se puede descargar; si no, los dígitos 8x8 de scikit-learn
DATA_DIR = None  # una carpeta con los cuatro ficheros IDX de MNIST; None: $JAXINTRO_DATA_DIR, la caché, una descarga
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

print("jax", jax.__version__, "optax", optax.__version__, "en", jax.devices()[0].platform)

# %% [markdown]
# ## 1. Funciones puras
#
# Las transformaciones de JAX trabajan sobre funciones *puras*: el resultado depende solo de los
# argumentos y nada de fuera cambia. El porqué se ve en cuanto compilamos. `jax.jit` ejecuta el
# cuerpo en Python una sola vez, con sustitutos abstractos (*tracers*) en lugar de los argumentos,
# anota las operaciones y, a partir de ahí, ejecuta el programa anotado. Un `print` dentro es un
# efecto secundario, así que solo ocurre durante esa primera traza:

# %%
def add_one(x):
    print("  trazando add_one con x =", x)
    return x + 1.0


jitted_add_one = jax.jit(add_one)
print("jitted_add_one(1.0) =", jitted_add_one(1.0))
print("jitted_add_one(2.0) =", jitted_add_one(2.0))

# %% [markdown]
# La segunda llamada no imprimió nada: Python no volvió a ejecutarse. Una variable global es la
# misma trampa disfrazada. Su valor se lee al trazar y queda grabado en el programa como una
# constante:

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
# La función compilada sigue multiplicando por 2. Si una función recibe como argumentos todo lo que
# necesita, significa lo mismo compilada o sin compilar.
#
# ## 2. `jax.numpy` y arrays inmutables
#
# `jax.numpy` reproduce la API de NumPy, con dos diferencias que conviene conocer desde el
# principio: el flotante por defecto es de 32 bits y los arrays no se pueden modificar en su sitio.

# %%
import numpy as np

x = jnp.arange(5.0)
print("x =", x, x.dtype)
print("por defecto en NumPy:", np.arange(5.0).dtype)
try:
    x[0] = 10.0
except TypeError as error:
    print("TypeError:", str(error).splitlines()[0])

# %% [markdown]
# En lugar de escribir en `x`, `x.at[índice]` describe un cambio y devuelve un array *nuevo*. Dentro
# de `jit`, XLA lo convierte en una actualización en el sitio siempre que el array antiguo ya no se
# necesite, así que no se pierde velocidad.

# %%
y = x.at[0].set(10.0)
z = x.at[1:3].add(100.0)
print("x.at[0].set(10.0)   ->", y)
print("x.at[1:3].add(100.0) ->", z)
print("x no ha cambiado:     ", x)

# %% [markdown]
# ## 3. `grad` y sus composiciones
#
# `jax.grad(f)` es una función nueva: la derivada de `f`. Para f(x) = x², f'(x) = 2x y f''(x) = 2:

# %%
def f(x):
    return x**2


print("f(3.0) =", f(3.0))
print("grad(f)(3.0) =", jax.grad(f)(3.0))
print("grad(grad(f))(3.0) =", jax.grad(jax.grad(f))(3.0))

# %% [markdown]
# Por defecto `grad` deriva respecto al primer argumento; `argnums` elige otros. `value_and_grad`
# devuelve además el valor, que es lo que necesita un paso de entrenamiento (la pérdida para
# mostrarla, el gradiente para avanzar). Para g(x, y) = x·y + sen x: ∂g/∂x = y + cos x y ∂g/∂y = x.

# %%
def g(x, y):
    return x * y + jnp.sin(x)


dg_dx, dg_dy = jax.grad(g, argnums=(0, 1))(0.0, 2.0)
print("en (0, 2): dg/dx =", dg_dx, " dg/dy =", dg_dy)
value, slope = jax.value_and_grad(f)(3.0)
print("value_and_grad(f)(3.0) =", (float(value), float(slope)))

# %% [markdown]
# Las transformaciones se combinan porque cada una recibe una función y devuelve otra: podemos
# compilar la derivada, o evaluarla en muchos puntos a la vez.

# %%
points = jnp.array([0.0, 1.0, 2.0, 3.0])
print("jit(grad(f))(3.0) =", jax.jit(jax.grad(f))(3.0))
print("vmap(grad(f))(points) =", jax.vmap(jax.grad(f))(points))

# %% [markdown]
# ## 4. `jit`, y lo que traza: el jaxpr
#
# Lo que `jit` anota al trazar es un *jaxpr*, el pequeño lenguaje intermedio de JAX: entradas con
# tipo, una lista de operaciones primitivas y las salidas. `jax.make_jaxpr` lo muestra. Esta es una
# capa densa:

# %%
def dense(w, b, x):
    return jnp.tanh(x @ w + b)


w = jnp.ones((3, 2))
b = jnp.zeros(2)
batch_x = jnp.ones((4, 3))
jaxpr = jax.make_jaxpr(dense)(w, b, batch_x)
print(jaxpr)
print("primitivas:", sorted({eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}))

# %% [markdown]
# El producto de matrices se ha convertido en `dot_general`, y las formas forman parte del
# programa. Por eso una forma nueva implica una traza nueva (y una compilación nueva), mientras que
# valores nuevos con la misma forma reutilizan el programa:

# %%
traced_shapes = []


@jax.jit
def double(x):
    traced_shapes.append(x.shape)  # un efecto secundario: solo se ejecuta al trazar
    return 2 * x


for _ in range(3):
    double(jnp.ones(3))
double(jnp.ones(4))
print("llamadas: 4, trazas:", len(traced_shapes), traced_shapes)

# %% [markdown]
# Al trazar, `x` tiene forma pero no valor, así que un `if` de Python sobre él no se puede decidir.
# JAX lo dice con un error; `jnp.where` (o `lax.cond`) deja la elección dentro del programa:

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
# ## 5. `vmap`, y gradientes por ejemplo
#
# Se escribe una función para *un* ejemplo y `jax.vmap` la hace funcionar sobre un lote. `in_axes`
# indica qué argumentos llevan el eje del lote (`0`) y cuáles se comparten (`None`):

# %%
def predict(w, b, x):
    return jnp.dot(x, w) + b


w = jnp.array([1.0, -2.0, 0.5])
b = 0.1
batch_x = jnp.arange(12.0).reshape(4, 3)
batch_y = jnp.array([1.0, 0.0, -1.0, 2.0])
batched_predict = jax.vmap(predict, in_axes=(None, None, 0))
print("batched_predict(w, b, batch_x) =", batched_predict(w, b, batch_x))
print("igual a batch_x @ w + b:", bool(jnp.allclose(batched_predict(w, b, batch_x), batch_x @ w + b)))

# %% [markdown]
# El mismo truco da lo que un simple `grad` de la pérdida del lote no puede dar: un gradiente *por
# ejemplo* (necesario para recortar el gradiente de cada ejemplo en el entrenamiento con
# privacidad diferencial, o para ver qué ejemplos tiran con más fuerza). `vmap(grad(pérdida))` es
# toda la receta:

# %%
def example_loss(w, x, y):
    return (jnp.dot(x, w) - y) ** 2


def batch_loss(w, xs, ys):
    return jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0))(w, xs, ys))


per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(w, batch_x, batch_y)
by_hand = 2 * (batch_x @ w - batch_y)[:, None] * batch_x
print("gradientes por ejemplo:", per_example.shape)
print("iguales a 2 (x·w - y) x a mano:", bool(jnp.allclose(per_example, by_hand)))
batch_grad = jax.grad(batch_loss)(w, batch_x, batch_y)
print("su media es el gradiente del lote:", bool(jnp.allclose(per_example.mean(axis=0), batch_grad)))

# %% [markdown]
# `jaxintro grads` hace esto con el MLP de la lección (ejercicio 2) y lo compara con un bucle de
# Python.
#
# ## 6. Pytrees
#
# Los parámetros no son un array sino un anidamiento de arrays: un diccionario de capas, cada una
# con un diccionario de pesos y sesgos. JAX llama *pytree* a cualquier anidamiento de listas,
# tuplas y diccionarios, y todas sus transformaciones lo aceptan. `jax.tree.map` aplica una función
# a cada hoja, y así una actualización toca todos los parámetros a la vez:

# %%
tree = {
    "layer1": {"w": jnp.ones((784, 256)), "b": jnp.zeros(256)},
    "layer2": {"w": jnp.ones((256, 10)), "b": jnp.zeros(10)},
}
print(jax.tree.map(jnp.shape, tree))
leaves = jax.tree.leaves(tree)
print("hojas:", len(leaves), " escalares:", sum(leaf.size for leaf in leaves))
grads = jax.tree.map(jnp.ones_like, tree)
stepped = jax.tree.map(lambda p, g: p - 0.1 * g, tree, grads)
print("un paso de SGD, lr 0.1: layer1 w[0, 0] =", stepped["layer1"]["w"][0, 0])

# %% [markdown]
# ## 7. Números aleatorios: claves, `split`, nunca reutilizadas
#
# NumPy guarda un estado aleatorio global y oculto; una función pura no puede. En JAX el azar sale
# de una *clave* explícita: la misma clave da siempre los mismos números. Para obtener números
# nuevos se divide la clave y cada trozo se usa una sola vez.

# %%
key = jax.random.key(SEED)
a = jax.random.normal(key, (3,))
b = jax.random.normal(key, (3,))
print("misma clave, mismos números:", bool(jnp.array_equal(a, b)))
key, subkey = jax.random.split(key)
c = jax.random.normal(subkey, (3,))
print("una clave dividida, otros números:", not bool(jnp.array_equal(a, c)))
print("tres claves a la vez:", jax.random.split(key, 3).shape)

# %% [markdown]
# ## 8. El MLP, paso a paso
#
# Ahora el modelo de la lección: un MLP 784-256-128-10 con ReLU, entrenado con Adam sobre MNIST.
# Primero los datos. `load_dataset` es el cargador de jaxintro (el mismo que usa `jaxintro train`):
# los píxeles se quedan en `uint8` y se escalan a [0, 1] dentro del paso.

# %%
data = load_dataset(DATASET, DATA_DIR)
x_train, y_train = data.x_train[:TRAIN_SIZE], data.y_train[:TRAIN_SIZE]
print(f"{data.name}: {len(x_train)} imágenes de entrenamiento y {len(data.x_test)} de prueba,"
      f" de {data.num_features} píxeles")
print("origen:", data.source)

fig, axes = plt.subplots(1, 8, figsize=(8, 1.4))
for ax, image, label in zip(axes, x_train, y_train):
    ax.imshow(image.reshape(data.image_shape), cmap="gray")
    ax.set_title(str(label))
    ax.axis("off")
plt.show()

# %% [markdown]
# **Inicialización.** La inicialización de He toma cada peso de N(0, 2/fan_in), lo que mantiene
# estable la escala de la señal a través de las capas ReLU; los sesgos empiezan en cero. Una clave
# se divide en una por capa, y se guarda otra para barajar.

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
print("parámetros:", sum(p.size for p in jax.tree.leaves(params)))
print(f"desviación típica de layer1 w: {float(params['layer1']['w'].std()):.4f},"
      f" sqrt(2 / fan_in) = {(2 / sizes[0]) ** 0.5:.4f}")

# %% [markdown]
# **Pasada hacia delante.** Dos capas ocultas con ReLU y una última capa que devuelve *logits*: una
# puntuación por clase, todavía no probabilidades.

# %%
def forward(params, x):
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]


x_batch, y_batch = x_train[:BATCH_SIZE], y_train[:BATCH_SIZE]
logits = forward(params, scale_images(x_batch))
print("logits:", logits.shape)
package_logits = mlp.mlp_forward(params, scale_images(x_batch))
print("igual que mlp_forward de jaxintro:", bool(jnp.allclose(logits, package_logits, atol=1e-5)))

# %% [markdown]
# **Pérdida.** Entropía cruzada a partir de `log_softmax`, que resta el logit más grande antes de
# tomar exponenciales, de modo que los logits grandes no desbordan. Antes de entrenar todas las
# clases son más o menos igual de probables, y la pérdida ronda ln 10 ≈ 2,30.

# %%
def loss_fn(params, x, y):
    log_probs = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(log_probs[jnp.arange(len(y)), y])


loss_before = loss_fn(params, scale_images(x_batch), y_batch)
print(f"pérdida antes de entrenar: {float(loss_before):.4f}")
print("igual que cross_entropy de jaxintro:", bool(jnp.allclose(loss_before, cross_entropy(logits, y_batch))))

# %% [markdown]
# **Un paso de entrenamiento.** `value_and_grad` da la pérdida y su gradiente respecto a cada
# parámetro (un pytree con la forma de `params`); el Adam de Optax convierte el gradiente en
# actualizaciones y lleva su propio estado (las estimaciones de los momentos). El optimizador se
# fija con `functools.partial` antes de `jit`, así que el paso compilado no lee ninguna global.

# %%
def train_step(params, opt_state, x_u8, y, *, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, scale_images(x_u8), y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


adam = optax.adam(1e-3)
step = jax.jit(functools.partial(train_step, optimizer=adam))
stepped_params, _, loss = step(params, adam.init(params), x_batch, y_batch)
loss_after = loss_fn(stepped_params, scale_images(x_batch), y_batch)
print(f"pérdida del primer lote: {float(loss):.4f}, tras un paso: {float(loss_after):.4f}")

# %% [markdown]
# `jaxintro train` ejecuta este mismo paso (`jaxintro.lesson.train_step`, que además cuenta los
# aciertos). Un paso de cada uno, desde el mismo punto de partida, llega a los mismos parámetros:

# %%
package_step = jax.jit(functools.partial(jaxintro_train_step, model=mlp.build(sizes), tx=adam))
package_params, _, metrics = package_step(params, adam.init(params), (x_batch, y_batch), None)
print("mismos parámetros que jaxintro.lesson.train_step:",
      jax.tree.all(jax.tree.map(lambda p, q: jnp.allclose(p, q, atol=1e-6), stepped_params, package_params)))

# %% [markdown]
# **Entrenamiento.** Cada época saca una permutación nueva de una clave nueva, la corta en lotes de
# 128 (descartando el último lote incompleto) y ejecuta el paso compilado en cada uno; después
# evalúa todo el conjunto de prueba. Cada época imprime una línea al estilo de la lección: la pérdida
# media de entrenamiento y la exactitud en prueba.

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
        print(f"Época {epoch:3d} | Pérdida: {history[-1][0]:.4f} | Exact. prueba: {history[-1][1]:.4f}")
    return params, history


params, history = train(params, adam, shuffle_key, EPOCHS)

# %%
epochs = range(1, len(history) + 1)
fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(9, 3))
loss_ax.plot(epochs, [loss for loss, _ in history], marker="o")
loss_ax.set(xlabel="época", ylabel="pérdida de entrenamiento")
acc_ax.plot(epochs, [acc for _, acc in history], marker="o", color="tab:green")
acc_ax.set(xlabel="época", ylabel="exactitud en prueba")
plt.show()

# %% [markdown]
# Lo que dice el modelo entrenado de las primeras imágenes de prueba (el título es la predicción,
# en rojo si falla):

# %%
predictions = jnp.argmax(forward(params, scale_images(x_test[:8])), axis=-1)
fig, axes = plt.subplots(1, 8, figsize=(8, 1.4))
for ax, image, label, guess in zip(axes, data.x_test, data.y_test, predictions):
    ax.imshow(image.reshape(data.image_shape), cmap="gray")
    ax.set_title(str(int(guess)), color="black" if guess == label else "red")
    ax.axis("off")
plt.show()
print("predicciones:", predictions.tolist())
print("etiquetas:   ", data.y_test[:8].tolist())

# %% [markdown]
# ## 9. Cadenas de Optax
#
# Un optimizador de Optax es una cadena de transformaciones del gradiente. Recortar la norma global
# del gradiente antes de Adam protege de un gradiente enorme ocasional, y un *schedule* hace de la
# tasa de aprendizaje una función del paso: aquí un calentamiento lineal y después un descenso en
# coseno.

# %%
total_steps = EPOCHS * (len(x_train) // BATCH_SIZE)
warmup_steps = max(1, total_steps // 10)
schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0, peak_value=1e-3, warmup_steps=warmup_steps, decay_steps=total_steps, end_value=1e-5)
for at in (0, warmup_steps, total_steps):
    print(f"tasa de aprendizaje en el paso {at}: {float(schedule(at)):.2e}")

clip = optax.clip_by_global_norm(1.0)
huge = jax.tree.map(lambda p: jnp.full_like(p, 100.0), params)
clipped, _ = clip.update(huge, clip.init(params))
print(f"norma global antes del recorte: {float(optax.tree.norm(huge)):.1f},",
      f"después: {float(optax.tree.norm(clipped)):.4f}")

# %% [markdown]
# La cadena es un optimizador como cualquier otro, así que la misma `train` la ejecuta, desde el
# mismo punto de partida:

# %%
chained = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))
chained_params, chained_history = train(init_params(init_key, sizes), chained, shuffle_key, EPOCHS)

# %% [markdown]
# `jaxintro train --clip-norm 1.0 --schedule warmup-cosine` construye esta cadena (véase
# `jaxintro/optim.py`), y `jaxintro experiment clipping` es el ejercicio 5 de la lección.
#
# ## 10. Un checkpoint con Orbax
#
# Los parámetros son un pytree de arrays, y Orbax guarda pytrees. `StandardCheckpointer` escribe
# en segundo plano (`wait_until_finished` espera a que termine) y restaura con las formas y los
# tipos que le damos. Aquí el checkpoint va a una carpeta temporal que se borra al final de la
# celda.

# %%
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "params"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, params)
    checkpointer.wait_until_finished()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
    restored = checkpointer.restore(path, abstract)
    checkpointer.close()

print("lo restaurado es igual a lo guardado:", jax.tree.all(jax.tree.map(jnp.array_equal, params, restored)))
print(f"exactitud en prueba de los parámetros restaurados: {float(accuracy(restored, x_test, y_test)):.4f}")

# %% [markdown]
# `jaxintro train` guarda el estado completo del entrenamiento (parámetros, el estado de Adam, la
# clave) al final de cada época con un `CheckpointManager` de Orbax, y `jaxintro train --resume`
# continúa desde ahí.
#
# ## 11. Y ahora
#
# - `jaxintro exercises`: los ejercicios de la lección, con comprobaciones que dicen qué mirar.
# - `jaxintro tour`: todas las ideas de arriba en la terminal, con más detalle (`--section trace`
#   muestra el jaxpr de la pérdida de la lección; `--section derivatives`, jacobianos y un hessiano).
# - `jaxintro train`: este entrenamiento, compilado como un solo programa por época;
#   `--model linen|nnx|equinox` entrena el mismo MLP escrito con Flax o Equinox, y `--seeds 8`,
#   ocho a la vez.
# - `jaxintro grads`, `jaxintro experiment dropout|models|clipping`, `jaxintro bench`: los
#   ejercicios 1 a 5; `jaxintro serve` permite dibujar un dígito y ver lo que ve el modelo.
# - Todo con `--help`; `jaxintro --lang es ...` habla español.
