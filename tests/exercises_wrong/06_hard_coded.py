# expect: hard_coded_structure
def sgd_update(params, grads, lr):
    return {name: {k: params[name][k] - lr * grads[name][k] for k in ("w", "b")} for name in params}
