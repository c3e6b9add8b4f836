# expect: mutated_input
def sgd_update(params, grads, lr):
    for name in params:  # assigns into the caller's dicts
        for k in params[name]:
            params[name][k] = params[name][k] - lr * grads[name][k]
    return params
