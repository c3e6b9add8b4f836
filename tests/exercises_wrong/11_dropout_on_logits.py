# expect: dropout_on_logits
def forward(params, x, *, key=None, rate=0.5):
    keys = jax.random.split(key, 3) if key is not None else [None] * 3
    h = x
    for i, (name, k) in enumerate(zip(["layer1", "layer2", "layer3"], keys)):
        h = h @ params[name]["w"] + params[name]["b"]
        h = jax.nn.relu(h) if i < 2 else h
        if k is not None:
            h = jnp.where(jax.random.bernoulli(k, 1.0 - rate, h.shape), h / (1.0 - rate), 0.0)
    return h
