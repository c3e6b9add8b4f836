# expect: truth_of_a_key
def forward(params, x, *, key=None, rate=0.5):
    keys = jax.random.split(key, 2) if key else [None, None]
    h = x
    for name, k in zip(["layer1", "layer2"], keys):
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
        if k is not None:
            h = jnp.where(jax.random.bernoulli(k, 1.0 - rate, h.shape), h / (1.0 - rate), 0.0)
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
