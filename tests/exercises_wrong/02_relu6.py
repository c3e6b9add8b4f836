# expect: large_activations
def forward(params, x):
    h = jax.nn.relu6(x @ params["layer1"]["w"] + params["layer1"]["b"])  # "ReLU", capped at 6
    h = jax.nn.relu6(h @ params["layer2"]["w"] + params["layer2"]["b"])
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
