"""What `serve`'s page shows of a model: its labels in the chosen language, the saliency of one input, and the test
images the run gets wrong, with their gradient norms (exercise 2) and the orders the mistakes panel sorts them by."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxintro.api import MISTAKE_SORTS
from jaxintro.config import EVAL_CHUNK
from jaxintro.evaluate import predict_all
from jaxintro.grads import per_example_grad_norms_for
from jaxintro.i18n import _, current_language
from jaxintro.lesson import scale_images


def page_strings() -> dict[str, str]:
    """Every label the page shows, in the chosen language: the page renders its text from this and nothing else."""
    return {
        "title": _("Play with the model"),
        "draw": _("Draw a digit"),
        "draw_hint": _("Draw with the mouse or a finger; the prediction follows as you draw."),
        "clear": _("Clear"),
        "undo": _("Undo"),
        "prediction": _("Prediction"),
        "probabilities": _("Class probabilities"),
        "sees": _("What the model sees"),
        "sees_hint": _("Your drawing after the MNIST-style preprocessing that jaxintro predict uses: "
                       "cropped to the ink, fitted into the box, centred by mass."),
        "saliency": _("Saliency"),
        "saliency_hint": _("jax.grad of the predicted class's log-probability with respect to the input pixels: "
                           "red pixels raise it, blue ones lower it."),
        "run": _("The run"),
        "model": _("Model"),
        "dataset": _("Dataset"),
        "epochs": _("Epochs"),
        "test_accuracy": _("Test accuracy"),
        "training": _("still training: the curves update live"),
        "finished": _("finished"),
        "curves": _("Training curves"),
        "loss": _("Loss"),
        "accuracy": _("Accuracy"),
        "train": _("train"),
        "test": _("test"),
        "held_out": _("held out"),
        "epoch": _("epoch"),
        "mistakes": _("Mistakes"),
        "mistakes_hint": _("Test images this run gets wrong, with the norm of each one's loss gradient "
                           "(exercise 2): confident mistakes have the largest."),
        "sort": _("Sort by"),
        "sort_norm": _("gradient norm, largest first"),
        "sort_norm_asc": _("gradient norm, smallest first"),
        "sort_index": _("test-set index"),
        "true_label": _("true"),
        "predicted": _("predicted"),
        "confidence": _("confidence"),
        "grad_norm": _("gradient norm"),
        "previous": _("Previous"),
        "next": _("Next"),
        "of": _("of"),
        "no_mistakes": _("No mistakes to show."),
        "loading": _("loading…"),
        "error": _("Error"),
        "locale": current_language(),  # how the page writes numbers (a decimal comma in Spanish), as the terminal
    }


def input_saliency(params: Any, x: Float[Array, " features"], *,
                   apply: Callable) -> tuple[Float[Array, " classes"], Float[Array, " features"]]:
    """Class probabilities of one input, and `jax.grad` of the predicted class's log-probability w.r.t. its pixels."""

    def top_log_prob(x):
        log_probs = jax.nn.log_softmax(apply(params, x[None], None)[0])
        # The argmax is an integer: the gradient flows through the chosen log-probability only.
        return log_probs[jnp.argmax(log_probs)], jnp.exp(log_probs)

    (_top, probs), saliency = jax.value_and_grad(top_log_prob, has_aux=True)(x)
    return probs, saliency


class Mistakes(NamedTuple):
    """The test images a run gets wrong, with their per-example gradient norms; `reason` says why there are none."""

    index: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    confidence: np.ndarray
    grad_norm: np.ndarray
    pixels: np.ndarray  # uint8 (n, features)
    total: int  # test images looked at
    reason: str | None = None


def find_mistakes(run: Any, x_test: np.ndarray, y_test: np.ndarray, chunk: int = EVAL_CHUNK) -> Mistakes:
    """Predict every test image; keep the wrong ones with their gradient norms (the fast norms for the pure-JAX MLP)."""
    probs = predict_all(run, x_test, chunk)
    prediction = probs.argmax(1)
    wrong = np.flatnonzero(prediction != y_test)
    norms_fn = per_example_grad_norms_for(run.model)
    norms = [np.asarray(norms_fn(run.params, scale_images(jnp.asarray(x_test[wrong[i:i + chunk]])),
                                 jnp.asarray(y_test[wrong[i:i + chunk]])))
             for i in range(0, len(wrong), chunk)]
    return Mistakes(wrong, y_test[wrong], prediction[wrong], probs[wrong, prediction[wrong]],
                    np.concatenate(norms) if norms else np.zeros(0, np.float32), x_test[wrong], len(x_test))


def no_mistakes(reason: str) -> Mistakes:
    """An empty mistakes panel that says why."""
    empty = np.zeros(0, np.int64)
    return Mistakes(empty, empty, empty, np.zeros(0), np.zeros(0), np.zeros((0, 0), np.uint8), 0, reason)


# How the mistakes panel can order the mistakes (`?sort=`), each an argsort of the mistakes.
MISTAKE_ORDERS: dict[str, Callable[["Mistakes"], np.ndarray]] = dict(zip(MISTAKE_SORTS, (
    lambda m: np.argsort(-m.grad_norm, kind="stable"),  # norm
    lambda m: np.argsort(m.grad_norm, kind="stable"),  # norm_asc
    lambda m: np.arange(len(m.index)),  # index
)))
