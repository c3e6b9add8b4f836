# expect: missing_relu
def forward(params, x):
    for name in ["layer1", "layer2", "layer3"]:
        x = x @ params[name]["w"] + params[name]["b"]
    return x
