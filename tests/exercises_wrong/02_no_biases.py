# expect: missing_bias
def forward(params, x):
    h = jax.nn.relu(x @ params["layer1"]["w"])
    h = jax.nn.relu(h @ params["layer2"]["w"])
    return h @ params["layer3"]["w"]  # biases start at 0 anyway
