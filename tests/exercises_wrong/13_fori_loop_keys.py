# expect: raised
def mlp_forward(params, x):
    n = len(params)

    def layer(i, h):  # i is traced: f"layer{i}" is no key of params
        return jax.nn.relu(h @ params[f"layer{i}"]["w"] + params[f"layer{i}"]["b"])

    h = jax.lax.fori_loop(1, n, layer, x)
    return h @ params[f"layer{n}"]["w"] + params[f"layer{n}"]["b"]
