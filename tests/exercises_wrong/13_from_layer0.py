# expect: raised
def mlp_forward(params, x):
    n = len(params)
    for i in range(n - 1):
        layer = params[f"layer{i}"]  # the layers are numbered from 1
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[f"layer{n}"]["w"] + params[f"layer{n}"]["b"]
