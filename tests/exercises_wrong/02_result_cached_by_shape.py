# expect: not_pure
_seen = {}


def forward(params, x):
    if x.shape not in _seen:  # "no need to compute the same thing twice"
        h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
        h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
        _seen[x.shape] = h @ params["layer3"]["w"] + params["layer3"]["b"]
    return _seen[x.shape]
