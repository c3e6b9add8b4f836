# expect: mutated_input
def forward(params, x):
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    params["layer1"]["b"] = params["layer1"]["b"] + 0.0 * h.mean()  # the same values, but the caller's dict written
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
