# expect: mask_placement
def forward(params, x, *, key=None, rate=0.5):
    keys = jax.random.split(key, 2) if key is not None else [None, None]
    h = x
    for name, k in zip(["layer1", "layer2"], keys):
        if k is not None:  # dropout on what enters layers 1 and 2 (x and h1), not on h1 and h2
            keep = jax.random.bernoulli(k, 1.0 - rate, h.shape)
            h = jnp.where(keep, h / (1.0 - rate), 0.0)
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
