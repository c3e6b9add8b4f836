# expect: raised
def grad_norms(grads):
    squares = [jnp.sum(grads[f"layer{i}"][k].reshape(grads[f"layer{i}"][k].shape[0], -1) ** 2, axis=1)
               for i in (1, 2, 3) for k in ("w", "b")]
    return jnp.sqrt(sum(squares))
