"""The lesson's experiments, each a few `fit` runs of the shared trainer compared side by side.

- `dropout` (exercise 1): the same training with and without dropout;
- `models`: the four model styles with the same seed;
- `clipping` (exercise 5): with and without `optax.clip_by_global_norm(1.0)` before Adam.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxintro.bench_torch import TORCH_MISSING, torch_mlp
from jaxintro.config import MODELS, TrainConfig
from jaxintro.data import Dataset, load_dataset
from jaxintro.errors import ConfigError, JaxintroError
from jaxintro.grads import per_example_grad_norms_for, per_example_grad_norms_loop, per_example_grad_norms_vmap
from jaxintro.i18n import Code, _, format_number
from jaxintro.lesson import scale_images
from jaxintro.models import Dense, model_for
from jaxintro.plots import plot_curves_compare, plot_image_grid, plot_series
from jaxintro.scoring import jit_count_correct
from jaxintro.train import FitResult, Trainer, fit

Log = Callable[[str], None]


def _run(config: TrainConfig, dataset: Dataset, label: str, log: Log) -> FitResult:
    log(f"--- {label}")
    return fit(config, dataset, log=log)


def dropout_experiment(base: TrainConfig, dataset: Dataset, out: Path, *, rate: float, log: Log) -> dict[str, Any]:
    """Train without and with dropout `rate`; compare test accuracy and the train-test gap."""
    configs = dataclasses.replace(base, dropout=0.0), dataclasses.replace(base, dropout=rate)
    runs = {  # keyed by the plot's legend
        _("no dropout"): _run(configs[0], dataset, _("without dropout"), log),
        _("dropout {rate:g}").format(rate=rate): _run(configs[1], dataset,
                                                      _("with dropout {rate:g}").format(rate=rate), log),
    }
    plot_curves_compare({k: [r._asdict() for r in v.history] for k, v in runs.items()}, out / "dropout.png",
                        title=_("Dropout on {dataset}").format(dataset=dataset.name))
    (plain, dropped) = runs.values()
    return {
        "rate": rate,
        "accuracy_without": plain.history[-1].test_accuracy,
        "accuracy_with": dropped.history[-1].test_accuracy,
        "gap_without": train_set_accuracy(plain, configs[0], dataset) - plain.history[-1].test_accuracy,
        "gap_with": train_set_accuracy(dropped, configs[1], dataset) - dropped.history[-1].test_accuracy,
        "plot": str(out / "dropout.png"),
    }


def train_set_accuracy(result: FitResult, config: TrainConfig, dataset: Dataset) -> float:
    """The final parameters' accuracy on the whole training set, dropout off (the epoch's running accuracy
    is measured with dropout on, which would hide the gap that dropout is meant to close)."""
    model = model_for(config, dataset.num_features, dataset.num_classes)
    correct, _loss = jit_count_correct(model)(result.state.params, dataset.x_train, dataset.y_train)
    return int(correct) / len(dataset.x_train)


def models_experiment(base: TrainConfig, dataset: Dataset, out: Path, *, log: Log) -> dict[str, Any]:
    """Train every model style with the same seed and config; one row each."""
    rows = []
    for style in MODELS:
        result = _run(dataclasses.replace(base, model=style), dataset, _("model {style}").format(style=style), log)
        rows.append({
            "model": style,
            "param_count": result.param_count,
            "test_accuracy": result.history[-1].test_accuracy,
            "seconds_per_epoch": float(np.median([r.seconds for r in result.history])),
            "compile_seconds": result.compile_seconds,
        })
    return {"rows": rows}


def clipping_experiment(base: TrainConfig, dataset: Dataset, out: Path, *, clip: float, log: Log) -> dict[str, Any]:
    """Train with and without `clip_by_global_norm(clip)`; record every step's gradient norm before clipping."""
    base = dataclasses.replace(base, record_grad_norm=True)  # both runs' norms, every step: the plot
    unclipped = _run(dataclasses.replace(base, clip_norm=None), dataset, _("without clipping"), log)
    clipped = _run(dataclasses.replace(base, clip_norm=clip), dataset,
                   _("with clip_by_global_norm({clip:g})").format(clip=Code(clip)), log)
    unclipped_norms = np.concatenate([m["grad_norm"] for m in unclipped.step_metrics])
    clipped_norms = np.concatenate([m["grad_norm"] for m in clipped.step_metrics])
    plot_series({_("without clipping"): unclipped_norms,
                 _("with clipping at {clip:g}").format(clip=clip): clipped_norms},
                out / "grad_norms.png", xlabel=_("training step"), ylabel=_("global gradient norm (before clipping)"),
                title=_("Gradient norms on {dataset}").format(dataset=dataset.name), hline=clip, logy=True)
    return {
        "clip_norm": clip,
        "accuracy_clipped": clipped.history[-1].test_accuracy,
        "accuracy_unclipped": unclipped.history[-1].test_accuracy,
        "clipped_fraction": float(np.mean(clipped_norms > clip)),
        "clipped_fraction_first_epoch": float(np.mean(clipped.step_metrics[0]["grad_norm"] > clip)),
        "median_norm_unclipped": float(np.median(unclipped_norms)),
        "max_norm_unclipped": float(np.max(unclipped_norms)),
        "plot": str(out / "grad_norms.png"),
    }


# ---------------------------------------------------------------- per-example gradients (exercise 2)


class GradsSubject(NamedTuple):
    """The model, parameters and data that `explain_grads` looked at (reused by `grads_benchmark`)."""

    model: Any
    params: Any
    dataset: Dataset


def check_count(n: int, dataset: Dataset) -> None:
    """`--n` must not ask for more test images than the dataset has."""
    if n > len(dataset.x_test):
        raise ConfigError(_("--n {n} is more than the {count} test images of {dataset}").format(
            n=n, count=len(dataset.x_test), dataset=dataset.name))


def grads_subject(run_dir: str | None, dataset_name: str, data_dir: str | None, *, n: int, seed: int,
                  setting: str | None, lines: list[str]) -> tuple[Any, Any, Any]:
    """The model, parameters and data `explain_grads` examines: a trained run's, or the lesson's MLP trained briefly
    (what was chosen is said in `lines`)."""
    from jaxintro.evaluate import load_run

    if run_dir is not None:
        run = load_run(Path(run_dir), setting)
        model, params = run.model, run.params
        dataset = load_dataset(run.dataset.name, data_dir or run.config.data_dir)
        check_count(n, dataset)
        lines.append(_("Model: {run_dir} ({model}, epoch {epoch}) on {dataset}").format(
            run_dir=run_dir, model=run.config.model, epoch=run.epoch, dataset=dataset.name))
        note = run.usage_note()  # several members: which of them the gradients go through (never a diverged one)
        if note:
            lines.append(_("Of its {count} models: {what}").format(count=run.members, what=note))
    else:
        dataset = load_dataset(dataset_name, data_dir)
        check_count(n, dataset)  # before training, not after it
        config = TrainConfig(dataset=dataset_name, data_dir=data_dir, epochs=2, seed=seed)
        lines.append(_("No --run given: training the lesson's MLP for {epochs} epochs on {dataset} first").format(
            epochs=config.epochs, dataset=dataset.name))
        result = fit(config, dataset, log=lambda line: None)
        model, params = Trainer.create(config, dataset).model, result.state.params
    return model, params, dataset


def explain_grads(run_dir: str | None, dataset_name: str, data_dir: str | None, *, n: int, seed: int,
                  out: Path, setting: str | None = None) -> tuple[dict[str, Any], list[str], GradsSubject]:
    """Per-example gradient norms of `n` test images, a sorted image grid, and what the data says about them.

    Returns the JSON report, the lines to print, and what was examined.
    """
    import jax
    import jax.numpy as jnp

    lines: list[str] = []
    model, params, dataset = grads_subject(run_dir, dataset_name, data_dir, n=n, seed=seed, setting=setting,
                                           lines=lines)
    x_u8, y = dataset.x_test[:n], dataset.y_test[:n]
    x = scale_images(jnp.asarray(x_u8))
    norms = np.asarray(jax.jit(lambda p, x, y: per_example_grad_norms_vmap(p, model.apply, x, y))(params, x, y))
    probs = np.asarray(jax.nn.softmax(model.apply(params, x, None)))
    preds, conf = probs.argmax(1), probs.max(1)
    order = np.argsort(-norms)
    wrong = preds != y
    captions = [f"#{i} y={dataset.classes[y[i]][:6]} p={dataset.classes[preds[i]][:6]}\n"
                f"conf {format_number(conf[i], '.2f')} |g| {format_number(norms[i], '.3g')}" for i in order]
    png = plot_image_grid(x_u8[order].reshape(-1, *dataset.image_shape), captions, out / "grads.png",
                          marked=list(wrong[order]),
                          title=_("{n} test images sorted by per-example gradient norm (largest first)").format(n=n))
    rank_corr = float(np.corrcoef(np.argsort(np.argsort(norms)), np.argsort(np.argsort(1 - conf)))[0, 1])
    lines.append(_("Per-example gradient norms of {n} test images: jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))")
                 .format(n=n))
    # Column headings, each translated alone (outside the f-string, where extraction finds them) to keep the widths.
    heads = [_("rank"), _("index"), _("label"), _("pred"), _("conf"), _("norm")]
    lines.append(" ".join(f"{h:>{w}}" for h, w in zip(heads, (4, 6, 6, 6, 6, 10))))
    for rank, i in enumerate(order[: min(8, n)], 1):
        mark = "  <- " + _("misclassified") if wrong[i] else ""
        lines.append(f"{rank:>4} {i:>6} {dataset.classes[y[i]][:6]:>6} {dataset.classes[preds[i]][:6]:>6} "
                     f"{format_number(conf[i], '>6.3f')} {format_number(norms[i], '>10.4g')}{mark}")
    top = order[: max(1, n // 8)]
    lines.append(_(
        "Answer: the {top} largest gradients belong to examples with mean confidence {top_conf:.2f} "
        "(all {n}: {all_conf:.2f}); {top_wrong} of them are misclassified ({all_wrong} of all {n}). "
        "Spearman correlation of norm with (1 - confidence): {corr:.2f}."
    ).format(top=len(top), top_conf=conf[top].mean(), n=n, all_conf=conf.mean(), top_wrong=int(wrong[top].sum()),
             all_wrong=int(wrong.sum()), corr=rank_corr))
    if wrong.any() and (~wrong).any():
        lines.append(_("Mean norm: misclassified {wrong:.4g}, correct {right:.4g}.").format(
            wrong=norms[wrong].mean(), right=norms[~wrong].mean()))
    lines.append(_("Why: the loss's gradient at the logits is softmax(z) - onehot(y); it vanishes as the model grows "
                   "sure and right, and is largest for confident mistakes, so those examples drive the update."))
    lines.append(_("Grid: {png}").format(png=png))
    report = {
        "indices": [int(i) for i in order],
        "labels": [int(y[i]) for i in order],
        "predictions": [int(preds[i]) for i in order],
        "confidences": [float(conf[i]) for i in order],
        "norms": [float(norms[i]) for i in order],
        "grid_png": str(png),
    }
    return report, lines, GradsSubject(model, params, dataset)


def grads_benchmark(subject: GradsSubject, *, n: int = 128, repeats: int = 7) -> dict[str, Any]:
    """Time per-example gradient norms: Python loop, vmap, the fast norms, and torch.func.vmap when installed."""
    import statistics
    import time

    import jax
    import jax.numpy as jnp

    model, params, dataset = subject
    x = scale_images(jnp.asarray(dataset.x_test[:n]))
    y = jnp.asarray(dataset.y_test[:n])
    fns: dict[str, Callable[[], Any]] = {
        "loop": lambda: per_example_grad_norms_loop(params, model.apply, x, y),
    }
    vmap_fn = jax.jit(lambda p, x, y: per_example_grad_norms_vmap(p, model.apply, x, y))
    fns["vmap"] = lambda: vmap_fn(params, x, y)
    report: dict[str, Any] = {"n": int(x.shape[0]), "ms": {}}
    if model.dense is not None:
        fast_fn = per_example_grad_norms_for(model)  # the fast norms, from the model's own layers
        fns["fast"] = lambda: fast_fn(params, x, y)
    else:
        report["fast_skipped"] = _("the fast norms need a model that describes its layers, not {model}").format(
            model=model.name)
    results = {}
    for name, fn in fns.items():
        results[name] = np.asarray(jax.block_until_ready(fn()))  # warm-up (and compile)
        times = []
        for _repeat in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times.append(time.perf_counter() - start)
        report["ms"][name] = statistics.median(times) * 1e3
    if "fast" in results:
        report["fast_max_rel_diff_vs_vmap"] = float(np.max(np.abs(results["fast"] - results["vmap"]) / results["vmap"]))
    if "fast" in results:  # a model that describes its layers: PyTorch's twin of them, where there is one
        try:
            report["ms"]["torch-func-vmap"] = _torch_func_norms_ms(model.dense, params, np.asarray(x), np.asarray(y),
                                                                   repeats)
        except ImportError:
            report["torch_skipped"] = _(TORCH_MISSING)
        except JaxintroError as exc:  # an activation the twin does not mirror (`bench_torch.TORCH_ACTIVATIONS`)
            report["torch_skipped"] = str(exc)
    return report


def _torch_func_norms_ms(dense: Dense, params, x: np.ndarray, y: np.ndarray, repeats: int) -> float:
    """Median ms of per-example gradient norms with `torch.func.vmap(grad)` on the same MLP."""
    import statistics
    import time

    import torch
    from torch.func import functional_call, grad, vmap

    net = torch_mlp([(np.asarray(w), np.asarray(b)) for w, b in dense.layers(params)], dense.activation)
    weights = {name: value.detach() for name, value in net.named_parameters()}

    def loss(w, xi, yi):
        return torch.nn.functional.cross_entropy(functional_call(net, w, (xi[None],)), yi[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    xt, yt = torch.from_numpy(np.array(x)), torch.from_numpy(y.astype(np.int64))

    def norms():
        g = per_example(weights, xt, yt)
        return torch.sqrt(sum(v.reshape(v.shape[0], -1).square().sum(1) for v in g.values()))

    norms()
    times = []
    for _repeat in range(repeats):
        start = time.perf_counter()
        norms()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3
