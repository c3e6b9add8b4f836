# expect: layers_in_string_order
def mlp_forward(params, x):
    leaves = jax.tree.leaves(params)  # b1, w1, b10, w10, ...: the keys sort as strings
    layers = list(zip(leaves[1::2], leaves[0::2]))
    for w, b in layers[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = layers[-1]
    return x @ w + b
