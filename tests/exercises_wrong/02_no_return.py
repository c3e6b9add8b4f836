# expect: mismatch
def forward(params, x):
    h = jax.nn.relu(x @ params["layer1"]["w"] + params["layer1"]["b"])
    h = jax.nn.relu(h @ params["layer2"]["w"] + params["layer2"]["b"])
    logits = h @ params["layer3"]["w"] + params["layer3"]["b"]  # computed, never returned
