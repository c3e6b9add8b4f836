# expect: mutated_input
def sgd_update(params, grads, lr):
    def step(p, g):
        p -= lr * g  # rebinds a JAX array, but writes into a NumPy one
        return p
    return jax.tree.map(step, params, grads)
