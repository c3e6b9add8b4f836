# expect: relu_on_logits
def forward(params, x):
    for name in ["layer1", "layer2", "layer3"]:
        x = jax.nn.relu(x @ params[name]["w"] + params[name]["b"])
    return x
