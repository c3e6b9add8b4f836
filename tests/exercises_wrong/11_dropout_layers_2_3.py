# expect: mask_placement
def forward(params, x, *, key=None, rate=0.5):
    keys = jax.random.split(key, 2) if key is not None else [None, None]
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = h @ params["layer2"]["w"] + params["layer2"]["b"]
    if keys[0] is not None:
        h = jnp.where(jax.random.bernoulli(keys[0], 1.0 - rate, h.shape), h / (1.0 - rate), 0.0)
    h = jax.nn.relu(h) @ params["layer3"]["w"] + params["layer3"]["b"]
    if keys[1] is not None:
        h = jnp.where(jax.random.bernoulli(keys[1], 1.0 - rate, h.shape), h / (1.0 - rate), 0.0)
    return h
