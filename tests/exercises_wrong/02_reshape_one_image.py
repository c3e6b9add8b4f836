# expect: raised
def forward(params, x):
    x = x.reshape(784)  # one image, as if the batch were not there
    for name in ("layer1", "layer2"):
        x = jax.nn.relu(x @ params[name]["w"] + params[name]["b"])
    return x @ params["layer3"]["w"] + params["layer3"]["b"]
