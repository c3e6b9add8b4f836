# expect: not_deterministic
_calls = [0]


def forward(params, x, *, key=None, rate=0.5):
    if key is not None:
        _calls[0] += 1
        key = jax.random.fold_in(key, _calls[0])  # "fresh masks every call"
    keys = jax.random.split(key, 2) if key is not None else [None, None]
    h = x
    for name, k in zip(["layer1", "layer2"], keys):
        h = jax.nn.relu(h @ params[name]["w"] + params[name]["b"])
        if k is not None:
            h = jnp.where(jax.random.bernoulli(k, 1.0 - rate, h.shape), h / (1.0 - rate), 0.0)
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
