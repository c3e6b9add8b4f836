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
}

HINTS = {
    "init_params": [
        "keys = jax.random.split(key, len(sizes) - 1) da una clave por capa; combínalas con zip con "
        "sizes[:-1] y sizes[1:].",
        "w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in); b = jnp.zeros(fan_out).",
        "Llama a las capas f\"layer{i + 1}\" (enumerate desde 0) y devuelve el dict.",
    ],
    "forward": [
        "x @ params[\"layer1\"][\"w\"] + params[\"layer1\"][\"b\"] es la capa 1 antes de su ReLU.",
        "jax.nn.relu solo tras las capas 1 y 2: la última devuelve logits, que pueden ser negativos.",
        "Devuelve los logits, no jax.nn.softmax de ellos: de eso se encarga la pérdida.",
    ],
    "loss_fn": [
        "log_probs = jax.nn.log_softmax(forward(params, x)) tiene forma (batch, classes).",
        "Toma la etiqueta de cada fila: jnp.take_along_axis(log_probs, y[:, None], axis=1) "
        "(o log_probs[jnp.arange(len(y)), y]).",
        "La pérdida es menos la media de esos valores: un escalar.",
    ],
    "train_step": [
        "loss, grads = jax.value_and_grad(loss_fn)(params, x, y)",
        "updates, opt_state = optimizer.update(grads, opt_state, params), y luego "
        "params = optax.apply_updates(params, updates).",
        "Devuelve también el opt_state NUEVO: ahí viven los momentos de Adam y el paso siguiente los necesita.",
    ],
}

DOCSTRINGS = {
    "init_params": {"init_params": '{"layer1": {"w": (fan_in, fan_out), "b": (fan_out,)}, ...}: pesos He-normales, '
                                   'sesgos a cero.'},
    "forward": {"forward": "Logits (batch, classes): ReLU tras las capas 1 y 2, nada tras la capa 3."},
    "loss_fn": {"loss_fn": "La media sobre el lote de -log p(etiqueta), un escalar; y contiene etiquetas enteras."},
    "train_step": {"train_step": "(params nuevos, opt_state nuevo, la pérdida antes del paso)."},
}
