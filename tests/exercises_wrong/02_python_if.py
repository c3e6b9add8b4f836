# expect: python_if_on_traced
def forward(params, x):
    h = x
    for name in ["layer1", "layer2"]:
        h = h @ params[name]["w"] + params[name]["b"]
        if h.max() > 0:  # a Python `if` on a value: fine eagerly, a TracerBoolConversionError under jit
            h = jax.nn.relu(h)
    return h @ params["layer3"]["w"] + params["layer3"]["b"]
