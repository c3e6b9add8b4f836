# expect: depth_hard_coded
def mlp_forward(params, x):
    layers = [params[f"layer{i}"] for i in range(1, 13) if f"layer{i}" in params]
    for layer in layers[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]
