# expect: mutated_input
def forward(params, x):
    params["layer1"]["b"] = params["layer1"]["b"] * 0  # changes the caller's dict
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
