# expect: structure
# Walks dicts, lists and tuples by hand, and rebuilds every tuple as a list: the pytree changes shape.
def sgd_update(params, grads, lr):
    if isinstance(params, dict):
        return {k: sgd_update(params[k], grads[k], lr) for k in params}
    if isinstance(params, (list, tuple)):
        return [sgd_update(p, g, lr) for p, g in zip(params, grads)]
    return params - lr * grads
