# expect: depth_hard_coded
def mlp_forward(params, x):
    leaves = jax.tree.leaves(params)
    layers = list(zip(leaves[1::2], leaves[0::2]))[:3]  # at most three layers
    for w, b in layers[:-1]:
        x = jax.nn.relu(x @ w + b)
    return x @ layers[-1][0] + layers[-1][1]
