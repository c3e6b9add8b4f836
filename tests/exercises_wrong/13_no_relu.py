# expect: missing_relu
def mlp_forward(params, x):
    leaves = jax.tree.leaves(params)
    for w, b in zip(leaves[1::2], leaves[0::2]):
        x = x @ w + b
    return x
