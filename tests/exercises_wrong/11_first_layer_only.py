# expect: one_layer_masked
def forward(params, x, *, key=None, rate=0.5):
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    if key is not None:  # dropout after the first hidden layer only
        keep = jax.random.bernoulli(jax.random.split(key)[0], 1 - rate, h.shape)
        h = jnp.where(keep, h / (1 - rate), 0.0)
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
