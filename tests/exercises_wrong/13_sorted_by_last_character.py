# expect: layers_out_of_order
def mlp_forward(params, x):
    names = sorted(params, key=lambda name: name[-1])  # right up to layer9
    for name in names[:-1]:
        x = jax.nn.relu(x @ params[name]["w"] + params[name]["b"])
    return x @ params[names[-1]]["w"] + params[names[-1]]["b"]
