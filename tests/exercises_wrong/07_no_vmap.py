# expect: applied_to_batch
def batched_predict(w, b, xs):
    return predict(w, b, xs)  # the batch's mean, not each example's
