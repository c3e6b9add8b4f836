# expect: ignores_key
def forward(params, x, *, key=None, rate=0.5):
    h = x
    for i, name in enumerate(["layer1", "layer2"]):
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
        if key is not None:
            keep = jax.random.bernoulli(jax.random.key(i), 1.0 - rate, h.shape)  # a new key... that never changes
            h = jnp.where(keep, h / (1.0 - rate), 0.0)
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
