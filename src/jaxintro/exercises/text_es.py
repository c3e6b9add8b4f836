"""Enunciados, pistas y docstrings en español."""

STATEMENTS = {
    "init_params": """Constrúyelo, paso 1: init_params

El MLP es un dict de capas, {"layer1": {"w": ..., "b": ...}, "layer2": ..., ...}, una capa entre
cada par de tamaños consecutivos: sizes=(784, 256, 128, 10) da tres capas, w de forma
(fan_in, fan_out) y b de forma (fan_out,).

Escribe init_params(key, sizes):
- divide la clave (split), una clave nueva por capa (JAX no tiene estado aleatorio global: una
  clave se usa una sola vez);
- pesos de jax.random.normal, escalados por sqrt(2 / fan_in) (inicialización de He: conserva la
  varianza de la señal a través de las ReLU; sin ella las activaciones se apagan o explotan con la
  profundidad);
- sesgos a cero.""",
    "forward": """Constrúyelo, paso 2: forward

La pasada hacia delante del MLP de 3 capas de la lección, sobre un lote x de forma
(batch, features):
  h1 = relu(x @ w1 + b1),  h2 = relu(h1 @ w2 + b2),  logits = h2 @ w3 + b3.
Sin ReLU tras la última capa: los logits son números reales cualesquiera y la pérdida los
convierte en probabilidades. Una función pura: solo lee params y x, y funciona bajo jax.jit.""",
    "loss_fn": """Constrúyelo, paso 3: loss_fn

La entropía cruzada media del lote: para cada ejemplo, menos la log-probabilidad que el modelo da
a su etiqueta, promediada sobre el lote. Toma las log-probabilidades con jax.nn.log_softmax(logits),
no con jnp.log(jax.nn.softmax(logits)): softmax redondea a 0 las probabilidades diminutas y
log(0) = -inf, mientras que log_softmax calcula logits - logsumexp(logits) directamente y se
mantiene finito. y contiene etiquetas enteras, de forma (batch,).""",
    "train_step": """Constrúyelo, paso 4: train_step

Un paso de entrenamiento, compilado: jax.value_and_grad(loss_fn) da la pérdida y el gradiente en
una sola pasada; optimizer.update convierte el gradiente en actualizaciones (Adam guarda sus
momentos en opt_state); optax.apply_updates las suma a los parámetros. Devuelve (params nuevos,
opt_state nuevo, pérdida), la pérdida medida antes del paso. Nada se cambia en el sitio: el
estado nuevo se devuelve. @jax.jit encima compila el paso entero en un solo programa XLA.""",
    "dropout": """Ejercicio 1: dropout, con una clave dividida por capa

Añade dropout a la pasada hacia delante de 3 capas. Con una clave (entrenamiento), tras cada ReLU
oculta conserva cada unidad con probabilidad 1 - rate (jax.random.bernoulli) y divide lo que se
conserva por (1 - rate) (dropout «invertido»: la activación esperada no cambia, así que nada cambia
al evaluar). Cada capa necesita su propia clave, dividida de la que recibes: con la misma clave
las dos capas apagarían las mismas unidades. Sin clave (evaluación), nada de dropout.
La misma clave debe dar las mismas máscaras (es una función pura); otra clave, otras máscaras.""",
    "per_example_grads": """Ejercicio 2: gradientes por ejemplo con vmap(grad), y sus normas

jax.grad(loss_fn) da UN gradiente, el de la pérdida media del lote. Para tener el gradiente propio
de cada ejemplo, escribe la pérdida de un ejemplo (un lote de uno: x[None], y[None]), toma su
jax.grad y mapéala sobre el lote con jax.vmap: los parámetros se comparten (in_axes None), x e y se
mapean (in_axes 0). El resultado tiene la forma de params con un eje de lote delante en cada hoja:
los mismos números que un bucle de Python de jax.grad sobre los ejemplos, en un solo programa.
Después grad_norms: la norma L2 global de cada ejemplo, sobre w y b de todas las capas juntas.""",
    "any_depth": """Ejercicio 3: un MLP de cualquier profundidad

Escribe mlp_forward para params con cualquier número de capas ("layer1" ... "layerN", N desde 1):
ReLU entre capas, ninguna tras la última. Cuenta las capas con jax.tree.leaves(params) (dos
hojas por capa, w y b) y recórrelas por número: params[f"layer{i}"]. No en el orden en que las
lista jax.tree.leaves: ordena las claves del dict como texto, así que "layer10" va antes que
"layer2" y un MLP profundo aplicaría sus capas desordenadas. Con tres capas debe coincidir con
el forward de la lección.""",
    "jit_timing": """Ejercicio 4: jit contra sin jit, medido con honradez

Dos trampas falsean los tiempos de JIT. La primera llamada a una función con jit la traza y la
compila: si la cronometras mides el compilador; llama antes a f una vez (calentamiento). Y JAX
despacha el trabajo de forma asíncrona: f(x) vuelve antes de que el resultado esté calculado;
para el reloj solo tras jax.block_until_ready(resultado).
Escribe time_call(f, *args, repeats): segundos medios por llamada en `repeats` llamadas, tras un
calentamiento, esperando cada resultado. Después compare_jit(f, *args, repeats):
{"nojit": ..., "jit": ...}, midiendo f tal cual y jax.jit(f) con time_call.""",
    "clipping": """Ejercicio 5: recorte del gradiente con optax.chain, y la curva de normas del gradiente

clip_by_global_norm(max_norm) reescala el gradiente entero, todas las hojas por un mismo factor,
cuando su norma global (la norma de todas las entradas juntas) supera max_norm: se conserva la
dirección, solo se acorta la longitud; los gradientes más pequeños pasan sin cambios.
optax.chain(clip, optimizer) recorta primero y luego pasa el gradiente recortado al optimizador.
Escribe global_norm(grads), clipped(optimizer, max_norm) y grad_norm_curve(params, batches,
optimizer), que entrena un paso por lote y devuelve la norma del gradiente de cada paso ANTES del
recorte, como un array de forma (steps,) (la curva que dibujar: ¿cuántas veces actuaría el recorte?).""",
    "immutable_update": """Ideas clave: los arrays son inmutables

Un array de JAX nunca cambia: a[i] = v lanza un TypeError. a.at[i].set(v) devuelve un array NUEVO
con la fila (o el elemento) i sustituida, y deja a como estaba; bajo jit XLA a menudo lo hace en el
sitio de todos modos, cuando puede probar que nadie necesita el array viejo. .at[i].add(v),
.mul(v), .min(v) funcionan igual.
Escribe set_row(a, i, value); debe funcionar bajo jax.jit, con i y value trazados, y conservar el
significado de NumPy de una i negativa (a[-1] es la última fila) y el dtype de a.""",
    "tree_map": """Ideas clave: pytrees y jax.tree.map

Los parámetros son un pytree: dicts, listas y tuplas anidados con arrays en las hojas.
jax.tree.map(f, arbol1, arbol2) llama a f con cada par de hojas y reconstruye la misma estructura,
sea cual sea. Escribe sgd_update(params, grads, lr), un paso de descenso de gradiente p - lr * g en
cada hoja, para CUALQUIER estructura (no solo el dict de capas de la lección), que devuelva un
pytree nuevo: los params recibidos no deben cambiar (una función pura).""",
    "vmap_in_axes": """Ideas clave: vmap e in_axes

predict(w, b, x) trata UN ejemplo x de forma (features,). jax.vmap lo convierte en una función de
un lote: in_axes dice, para cada argumento, qué eje es el del lote, o None cuando el argumento es
el mismo para todos los ejemplos. Escribe batched_predict(w, b, xs) con jax.vmap: w y b se
comparten, xs se mapea por filas. (predict centra x en su propia media, así que llamarla con todo
el lote a la vez no es lo mismo.)""",
    "scan": """Ideas clave: un bucle como lax.scan

Un bucle for de Python dentro de una función con jit se desenrolla: el programa crece con la
longitud. jax.lax.scan(step, carry, xs) compila step una vez y lo ejecuta sobre xs:
step(carry, x) devuelve (carry_nuevo, salida), y scan devuelve (carry_final, todas las salidas
apiladas). Escribe moving_average(xs, decay): m empieza en 0 y m_t = decay * m_(t-1) +
(1 - decay) * x_t; devuelve cada m_t (con la forma de xs). xs tiene valores o vectores, con el
tiempo en su primer eje. Debe funcionar bajo jit, con decay trazado.""",
    "cond": """Ideas clave: una rama como lax.cond

Bajo jit un array es un tracer, un valor abstracto con forma y dtype pero sin número: un `if x >= 0:`
de Python no puede decidir y lanza TracerBoolConversionError. jax.lax.cond(pred, f_cierto,
f_falso, operando) elige la rama cuando el programa se ejecuta. (jnp.where calcula las dos ramas y
elige elemento a elemento: vale para los valores, pero un NaN en la rama no tomada envenena el
gradiente.) Escribe signed_sqrt(x) para un escalar x: sqrt(x) si x >= 0, si no -sqrt(-x).""",
    "split_keys": """Ideas clave: claves PRNG

JAX no tiene estado aleatorio oculto: cada función aleatoria recibe una clave, y la misma clave da
siempre los mismos números. Así que una clave se usa una vez: jax.random.split(key, n) da n claves
nuevas independientes y, tras dividirla, la clave vieja no se vuelve a usar. Escribe
noisy_copies(key, x, n): n copias de x, cada una con su propio ruido normal estándar (forma
(n, *x.shape)).""",
}

HINTS = {
    "init_params": [
        "La inicialización de He escala los pesos aleatorios de cada capa por sqrt(2 / fan_in), y "
        "cada capa necesita su propia clave: la aleatoriedad de JAX es explícita.",
        "keys = jax.random.split(key, len(sizes) - 1) da una clave por capa; combínalas con zip con "
        "sizes[:-1] y sizes[1:].",
        "w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in); b = jnp.zeros(fan_out).",
        "Llama a las capas f\"layer{i + 1}\" (enumerate desde 0) y devuelve el dict.",
    ],
    "forward": [
        "Un forward es una cadena de aplicaciones afines, con una ReLU entre ellas pero no tras la "
        "última: los logits pueden ser cualquier número real.",
        "x @ params[\"layer1\"][\"w\"] + params[\"layer1\"][\"b\"] es la capa 1 antes de su ReLU.",
        "jax.nn.relu solo tras las capas 1 y 2: la última devuelve logits, que pueden ser negativos.",
        "Devuelve los logits, no jax.nn.softmax de ellos: de eso se encarga la pérdida.",
    ],
    "loss_fn": [
        "La entropía cruzada es menos la media de la log-probabilidad de la clase correcta; "
        "log_softmax calcula esas log-probabilidades de forma estable.",
        "log_probs = jax.nn.log_softmax(forward(params, x)) tiene forma (batch, classes).",
        "Toma la etiqueta de cada fila: jnp.take_along_axis(log_probs, y[:, None], axis=1) "
        "(o log_probs[jnp.arange(len(y)), y]).",
        "La pérdida es menos la media de esos valores: un escalar.",
    ],
    "train_step": [
        "Un paso: la pérdida y su gradiente de una vez; luego el optimizador convierte el gradiente "
        "en actualizaciones y devuelve su propio estado nuevo.",
        "loss, grads = jax.value_and_grad(loss_fn)(params, x, y)",
        "updates, opt_state = optimizer.update(grads, opt_state, params), y luego "
        "params = optax.apply_updates(params, updates).",
        "Devuelve también el opt_state NUEVO: ahí viven los momentos de Adam y el paso siguiente los necesita.",
    ],
    "dropout": [
        "Dropout pone a cero cada unidad oculta con probabilidad rate y escala las que quedan por 1 /"
        " (1 - rate), para que el valor esperado no cambie; sin clave no hace nada.",
        "k1, k2 = jax.random.split(key) cuando hay clave: una clave para cada capa oculta.",
        "keep = jax.random.bernoulli(k1, 1.0 - rate, h.shape); h = jnp.where(keep, h / (1.0 - rate), 0.0)",
        "`if key is not None:` está bien bajo jit: pregunta por un valor de Python (None o no), no por el valor de "
        "un array.",
    ],
    "per_example_grads": [
        "Un gradiente por ejemplo es el gradiente de la pérdida de un solo ejemplo: escribe la "
        "pérdida de un ejemplo, derívala y deja que vmap la aplique a todo el lote.",
        "def example_loss(p, xi, yi): return loss_fn(p, xi[None], yi[None])  # un lote de uno",
        "jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y): None = compartido, 0 = mapeado.",
        "grad_norms: para cada hoja g, jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1); súmalas sobre las hojas "
        "y luego jnp.sqrt.",
    ],
    "any_depth": [
        "Las hojas de un pytree dicen su tamaño: cada capa guarda dos arrays, w y b.",
        "n = len(jax.tree.leaves(params)) // 2 capas; recórrelas por número, params[f\"layer{i}\"] para i en "
        "1..n. El orden de sus hojas es una trampa: las claves se ordenan como texto, \"layer10\" antes que \"layer2\".",
        "for i in range(1, n): x = jax.nn.relu(x @ params[f\"layer{i}\"][\"w\"] + params[f\"layer{i}\"][\"b\"]); "
        "después la capa n sola, sin ReLU.",
    ],
    "jit_timing": [
        "La primera llamada a una función con jit la compila, y una llamada vuelve antes de que su "
        "resultado esté listo: una medida honrada deja fuera la primera y espera cada resultado.",
        "Calentamiento: jax.block_until_ready(f(*args)) una vez antes de time.perf_counter().",
        "En el bucle: jax.block_until_ready(f(*args)) (un resultado ya listo se devuelve al instante).",
        "Divide el tiempo transcurrido por repeats. compare_jit: time_call(f, ...) y time_call(jax.jit(f), ...).",
    ],
    "clipping": [
        "Recortar por la norma global escala todo el gradiente por un mismo factor cuando su norma "
        "(sobre todas las hojas) supera el límite; debe ocurrir antes de que el optimizador vea el "
        "gradiente.",
        "global_norm: jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))) (optax.tree.norm hace lo "
        "mismo).",
        "clipped: optax.chain(optax.clip_by_global_norm(max_norm), optimizer): el recorte primero.",
        "grad_norm_curve: grads = jax.grad(loss_fn)(params, x, y); guarda global_norm(grads) antes de "
        "optimizer.update, que es donde ocurre el recorte.",
    ],
    "immutable_update": [
        "Los arrays de JAX nunca cambian: una actualización devuelve un array nuevo y el antiguo "
        "sigue como estaba.",
        "a.at[i] selecciona la fila i sin cambiar nada; .set(value) devuelve la copia actualizada.",
        "return a.at[i].set(value)",
    ],
    "tree_map": [
        "jax.tree.map aplica una función hoja a hoja a uno o más pytrees de la misma estructura y "
        "devuelve un pytree nuevo.",
        "jax.tree.map(f, params, grads) llama a f(p, g) con cada par de hojas.",
        "return jax.tree.map(lambda p, g: p - lr * g, params, grads): sin bucle sobre claves, sin asignaciones.",
    ],
    "vmap_in_axes": [
        "vmap necesita saber, para cada argumento, qué eje es el del lote, o que no hay ninguno (el "
        "argumento es compartido).",
        "in_axes tiene una entrada por argumento de predict: (w, b, x).",
        "jax.vmap(predict, in_axes=(None, None, 0))(w, b, xs): None = igual para todos los ejemplos.",
    ],
    "scan": [
        "lax.scan ejecuta una función de paso sobre una secuencia; el paso recibe el carry y un "
        "elemento, y devuelve el carry nuevo y una salida.",
        "def step(m, x): m = decay * m + (1 - decay) * x; return m, m  # (carry, salida)",
        "_, history = jax.lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs); return history",
    ],
    "cond": [
        "Bajo jit, un if de Python no puede preguntar por un valor trazado: lax.cond recibe la "
        "condición y las dos ramas como funciones, y traza ambas.",
        "jax.lax.cond(x >= 0, lambda v: ..., lambda v: ..., x): la primera función se ejecuta si se cumple la "
        "condición.",
        "La rama negativa: lambda v: -jnp.sqrt(-v).",
    ],
    "split_keys": [
        "Reutilizar una clave da otra vez los mismos números: divídela en tantas claves nuevas como "
        "sorteos y usa cada una una vez.",
        "keys = jax.random.split(key, n): una clave por copia; no uses `key` después.",
        "jax.vmap(lambda k: x + jax.random.normal(k, x.shape))(keys), o un bucle sobre keys y jnp.stack.",
    ],
}

# A hint for one mistake, keyed by the check's key: `hint` shows it first when the last check failed with it.
KEY_HINTS = {
    "per_example_grads": {
        "example_not_a_batch": "vmap ejecuta su función con un ejemplo cada vez: x ha perdido su eje de lote. La "
            "loss_fn dada quiere un lote, así que deriva def example_loss(p, xi, yi): return loss_fn(p, xi[None], "
            "yi[None]).",
    },
    "scan": {
        "carry_is_input": "El carry es lo que el paso siguiente recibe como m: debe ser la media nueva, no la "
            "entrada x.",
        "history_shifted": "El segundo valor que devuelve un paso es lo que scan apila como salida: la media nueva, "
            "no la anterior.",
    },
    "any_depth": {
        "layers_in_string_order": "jax.tree.leaves ordena las claves del dict como texto: layer10 va antes que layer2. "
            "Cuenta con él y luego indexa params[f\"layer{i}\"] por número.",
    },
    "train_step": {
        "opt_state_not_updated": "optimizer.update devuelve (updates, opt_state_nuevo): devuelve ese estado nuevo, o Adam "
            "empieza de cero en cada paso.",
    },
    "tree_map": {
        "wrong_sign": "Un paso de descenso resta lr * g: p + lr * g sube por el gradiente.",
    },
    "jit_timing": {
        "no_warmup": "Llama a f una vez (y espérala) antes de poner en marcha el reloj: la primera llamada "
            "incluye la compilación.",
        "no_block_until_ready": "Espera el resultado con jax.block_until_ready antes de parar el reloj: una llamada "
            "vuelve antes de terminar su trabajo.",
        "jit_rewrapped": "Envuelve f una sola vez, jitted = jax.jit(f), y pasa esa función a time_call: un jax.jit(f) "
            "nuevo en cada llamada es una función nueva, cuya primera llamada toma el camino lento de JAX.",
    },
    "clipping": {
        "clip_after_optimizer": "En optax.chain el orden importa: el recorte va primero, para que el optimizador vea el "
            "gradiente recortado.",
    },
    "dropout": {
        "keep_is_rate": "jax.random.bernoulli(k, p) es True con probabilidad p: en dropout, p es la probabilidad "
            "de CONSERVAR, 1 - rate.",
        "key_reused": "Divide la clave: la máscara de cada capa oculta necesita su propia clave.",
    },
    "split_keys": {
        "key_reused": "jax.random.split(key, n) da n claves nuevas; cada sorteo usa una de ellas.",
    },
    "loss_fn": {
        "unstable_log_softmax": "jnp.log(jax.nn.softmax(z)) da -inf con una diferencia grande de logits: "
            "jax.nn.log_softmax(z) es la forma estable.",
    },
}

DOCSTRINGS = {
    "init_params": {"init_params": '{"layer1": {"w": (fan_in, fan_out), "b": (fan_out,)}, ...}: pesos He-normales, '
                                   'sesgos a cero.'},
    "forward": {"forward": "Logits (batch, classes): ReLU tras las capas 1 y 2, nada tras la capa 3."},
    "loss_fn": {"loss_fn": "La media sobre el lote de -log p(etiqueta), un escalar; y contiene etiquetas enteras."},
    "train_step": {"train_step": "(params nuevos, opt_state nuevo, la pérdida antes del paso)."},
    "dropout": {"forward": "Logits del MLP de 3 capas; con clave, dropout invertido (conserva 1 - rate, escala por "
                           "1 / (1 - rate)) tras cada ReLU oculta, una clave nueva por capa; sin clave, sin dropout."},
    "per_example_grads": {
        "per_example_grads": "El gradiente de la pérdida de cada ejemplo: con la forma de params y un eje de lote "
                             "delante en cada hoja.",
        "grad_norms": "La norma L2 global del gradiente de cada ejemplo (sobre todas las capas, w y b): forma (batch,).",
    },
    "any_depth": {"mlp_forward": 'Logits de un MLP con cualquier número de capas {"layer1": {"w", "b"}, ..., "layerN"}: '
                                 "ReLU entre capas."},
    "jit_timing": {
        "time_call": "Segundos medios por llamada de f(*args) en `repeats` llamadas, tras un calentamiento, esperando "
                     "cada resultado.",
        "compare_jit": '{"nojit": segundos por llamada de f tal cual, "jit": de jax.jit(f)}, ambos con time_call.',
    },
    "clipping": {
        "global_norm": "La norma L2 de todas las hojas de `grads` juntas: raíz de la suma de cada entrada al cuadrado.",
        "clipped": "`optimizer`, alimentado con gradientes cuya norma global se recorta antes a max_norm.",
        "grad_norm_curve": "Un paso de entrenamiento por cada (x, y) de batches; devuelve la norma global del "
                           "gradiente de cada paso, antes del recorte.",
    },
    "immutable_update": {"set_row": "Una copia de `a` cuya fila (o elemento) `i` vale `value`; `a` queda como estaba."},
    "tree_map": {"sgd_update": "Un pytree nuevo con la forma de `params`: cada hoja p pasa a ser p - lr * g; `params` "
                               "no cambia."},
    "vmap_in_axes": {"batched_predict": "Las puntuaciones (batch, classes) de cada fila de xs: `predict` mapeada sobre "
                                        "el lote, con w y b compartidos."},
    "scan": {"moving_average": "m_t = decay * m_(t-1) + (1 - decay) * x_t, empezando en m = 0: cada m_t, con la forma "
                               "de xs (el tiempo primero)."},
    "cond": {"signed_sqrt": "sqrt(x) si x >= 0, si no -sqrt(-x), para un escalar x; debe funcionar bajo jax.jit."},
    "split_keys": {"noisy_copies": "n copias de x (forma (n, *x.shape)), cada una más su propio ruido normal "
                                   "estándar."},
}

# The docstrings of the code each file gives (not written by the learner) and of each solution file itself, as
# they read in Spanish.
GIVEN = {
    "Given: a linear model's mean squared error.": "Dado: el error cuadrático medio de un modelo lineal.",
    "Given: logits of the 3-layer MLP.": "Dado: logits del MLP de 3 capas.",
    "Given: mean cross-entropy of a batch x (batch, features), y (batch,).":
        "Dado: entropía cruzada media de un lote x (batch, features), y (batch,).",
    "Given: the scores (classes,) of ONE example x (features,), centred on its own mean.":
        "Dado: las puntuaciones (classes,) de UN ejemplo x (features,), centrado en su propia media.",
    "Step 1, given: He-normal weights, zero biases.": "Paso 1, dado: pesos He-normales, sesgos a cero.",
    "Step 2, given: logits of the 3-layer MLP.": "Paso 2, dado: logits del MLP de 3 capas.",
    "Step 3, given: mean cross-entropy.": "Paso 3, dado: entropía cruzada media.",
    # each solution file's first line
    "Build it, step 1: the MLP's parameters, He-initialised from split keys.":
        "Constrúyelo, paso 1: los parámetros del MLP, con inicialización de He a partir de claves divididas.",
    "Build it, step 2: the forward pass of the 3-layer MLP.":
        "Constrúyelo, paso 2: la pasada hacia delante del MLP de 3 capas.",
    "Build it, step 3: the loss, a mean cross-entropy through log-softmax.":
        "Constrúyelo, paso 3: la pérdida, una entropía cruzada media a través de log-softmax.",
    "Build it, step 4: one training step with value_and_grad and Optax, compiled with jit.":
        "Constrúyelo, paso 4: un paso de entrenamiento con value_and_grad y Optax, compilado con jit.",
    "Core ideas: arrays are immutable; `.at[i].set(v)` returns an updated copy.":
        "Ideas clave: los arrays son inmutables; `.at[i].set(v)` devuelve una copia actualizada.",
    "Core ideas: a pytree update with jax.tree.map, for any nesting of dicts, lists and tuples.":
        "Ideas clave: una actualización de un pytree con jax.tree.map, para cualquier anidación de dicts, listas "
        "y tuplas.",
    "Core ideas: vmap with the right in_axes, batching a one-example function.":
        "Ideas clave: vmap con los in_axes correctos, para un lote de una función de un ejemplo.",
    "Core ideas: a Python loop rewritten as lax.scan (one compiled step, any length).":
        "Ideas clave: un bucle de Python reescrito como lax.scan (un paso compilado, cualquier longitud).",
    "Core ideas: a branch on a value as lax.cond (a Python `if` cannot see a traced value).":
        "Ideas clave: una bifurcación según un valor como lax.cond (un `if` de Python no ve un valor trazado).",
    "Core ideas: PRNG keys are split, and each key is used once.":
        "Ideas clave: las claves PRNG se dividen, y cada clave se usa una vez.",
    "Exercise 1: dropout in the MLP, with a key split per layer.":
        "Ejercicio 1: dropout en el MLP, con una clave dividida por capa.",
    "Exercise 2: per-example gradients with vmap(grad), and their norms.":
        "Ejercicio 2: gradientes por ejemplo con vmap(grad), y sus normas.",
    "Exercise 3: an MLP forward pass of any depth: count the layers with jax.tree.leaves, walk them by number.":
        "Ejercicio 3: la pasada hacia delante de un MLP de cualquier profundidad: cuenta las capas con "
        "jax.tree.leaves y recórrelas por número.",
    "Exercise 4: jit against no jit, timed honestly: warm-up first, and wait for the result.":
        "Ejercicio 4: jit frente a sin jit, medido con honestidad: primero el calentamiento, y espera al resultado.",
    "Exercise 5: gradient clipping with optax.chain, and the curve of gradient norms.":
        "Ejercicio 5: recorte del gradiente con optax.chain, y la curva de las normas del gradiente.",
}

# The comments of our solutions (`solution N`), English -> Spanish.
SOLUTION_COMMENTS = {
    'By number, not in the leaves\' order: jax.tree.leaves sorts the keys as strings, "layer10" before "layer2".':
        'Por número, no en el orden de las hojas: jax.tree.leaves ordena las claves como texto, "layer10" antes '
        'que "layer2".',
    "(the carry to the next step, this step's output)": "(el carry para el paso siguiente, la salida de este paso)",
    "m = 0, shaped like one x_t": "m = 0, con la forma de un x_t",
    "He init keeps ReLU signals alive": "la inicialización de He mantiene vivas las señales de ReLU",
    "JAX returns before the work is done: wait for it": "JAX vuelve antes de terminar el trabajo: espéralo",
    "None: the same w and b for every example": "None: los mismos w y b para cada ejemplo",
    "a Python `if` on a Python value (None or not): fine under jit":
        "un `if` de Python sobre un valor de Python (None o no): correcto bajo jit",
    "a batch of one": "un lote de uno",
    "a new array: JAX arrays cannot change in place": "un array nuevo: los arrays de JAX no cambian en su sitio",
    "clip, then the optimizer": "recorte, luego el optimizador",
    "logits: no ReLU, the loss wants any real number": "logits: sin ReLU, la pérdida admite cualquier número real",
    "n new keys; `key` itself is not used again": "n claves nuevas; `key` no se vuelve a usar",
    "no ReLU on the logits": "sin ReLU en los logits",
    "one key per hidden layer": "una clave por capa oculta",
    "one key per layer: a key is used once": "una clave por capa: cada clave se usa una vez",
    "one pass gives both": "una sola pasada da las dos cosas",
    "params shared, x and y mapped": "params compartidos, x e y mapeados",
    "scaled so the expected activation is unchanged": "escalado para que la activación esperada no cambie",
    "stable: never takes the log of a rounded-to-0 probability":
        "estable: nunca toma el log de una probabilidad redondeada a 0",
    "the raw gradient: what clipping will act on": "el gradiente sin recortar: sobre el que actuará el recorte",
    "two leaves per layer, w and b": "dos hojas por capa, w y b",
    "warm-up: the first call of a jitted f traces and compiles":
        "calentamiento: la primera llamada a una f con jit la traza y la compila",
}
