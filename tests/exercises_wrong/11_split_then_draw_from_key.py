# expect: key_reused
def forward(params, x, *, key=None, rate=0.5):
    h = x
    for name in ("layer1", "layer2"):
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
        if key is not None:
            key, subkey = jax.random.split(key)
            keep = jax.random.bernoulli(key, 1.0 - rate, h.shape)  # key is split again for the next layer
            h = jnp.where(keep, h / (1.0 - rate), 0.0)
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
