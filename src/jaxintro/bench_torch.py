"""PyTorch's twin of the lesson's MLP: the `torch-eager` / `torch-compile` rows and the same job as `train`."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from jaxintro.bench_plan import Plan, RowResult, plan_layers, timed_windows
from jaxintro.config import EVAL_CHUNK
from jaxintro.errors import JaxintroError
from jaxintro.i18n import N_, _
from jaxintro.models.base import ACTIVATIONS, LESSON_ACTIVATION
from jaxintro.runtime import peak_rss_mb

# Why a row was skipped. The row's own process, which knows no --lang, writes it in English into bench.json;
# `skip_reason` translates it where the table is printed. The details after ": " are PyTorch's own words.
TORCH_MISSING = N_("torch is not installed (`make bench` installs it into .venv)")
COMPILE_UNAVAILABLE = N_("torch.compile unavailable")
COMPILE_FAILED = N_("torch.compile failed")


# The JAX activations the twin can mirror (`models.Dense.activation`), each as the name of its PyTorch module (one
# that computes the same function: `tests/test_bench.py` compares the two for every row). Another is refused by name.
TORCH_ACTIVATIONS = {ACTIVATIONS["relu"]: "ReLU"}


def torch_mlp(layers: list[tuple[np.ndarray, np.ndarray]], activation: Callable = ACTIVATIONS[LESSON_ACTIVATION]):
    """A model's dense stack (`models.Dense`) in PyTorch, with the given (w (in, out), b) per layer: Linear ->
    activation ... -> Linear (the lesson's MLP by default)."""
    import torch

    if activation not in TORCH_ACTIVATIONS:
        name = lambda f: getattr(f, "__name__", repr(f))  # noqa: E731
        raise JaxintroError(_("the PyTorch twin has no {activation} (it mirrors {known})").format(
            activation=name(activation), known=", ".join(map(name, TORCH_ACTIVATIONS))))
    modules: list[torch.nn.Module] = []
    for i, (w, b) in enumerate(layers):
        linear = torch.nn.Linear(*w.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.asarray(w).T.copy()))
            linear.bias.copy_(torch.from_numpy(np.array(b)))
        modules.append(linear)
        if i < len(layers) - 1:
            modules.append(getattr(torch.nn, TORCH_ACTIVATIONS[activation])())
    return torch.nn.Sequential(*modules)


def _torch_model(plan: Plan):
    return torch_mlp(plan_layers(plan))


def row_torch(plan: Plan, *, compile: bool) -> RowResult:
    """PyTorch on the CPU: the same MLP, init, batches and Adam (eager, or `torch.compile`d)."""
    name = "torch-compile" if compile else "torch-eager"
    try:
        import torch
    except ImportError:
        return RowResult(name, skipped=TORCH_MISSING)
    model = _torch_model(plan)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_all, y_all = torch.from_numpy(plan.x), torch.from_numpy(plan.y.astype(np.int64))
    loss_fn = torch.nn.functional.cross_entropy

    def step(idx) -> torch.Tensor:
        xb = x_all[idx].float() / 255.0
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(xb), y_all[idx])
        loss.backward()
        opt.step()
        return loss.detach()

    forward = model
    if compile:
        try:
            forward = torch.compile(model)
        except Exception as exc:  # torch.compile needs a working C++ toolchain
            return RowResult(name, skipped=f"{COMPILE_UNAVAILABLE}: {exc}")
    result = RowResult(name)
    perm = torch.from_numpy(plan.perm)
    start = time.perf_counter()
    try:
        losses = [float(step(perm[0]))]
    except Exception as exc:
        return RowResult(name, skipped=f"{COMPILE_FAILED}: {type(exc).__name__}: {exc}"[:300])
    result.compile_seconds = time.perf_counter() - start
    losses += [float(step(idx)) for idx in perm[1:3]]
    result.losses = losses

    def epoch() -> None:
        for idx in perm:
            step(idx)

    epoch()
    result.ms_per_step = statistics.median(timed_windows(epoch, plan.repeats)) / len(plan.perm) * 1e3
    return result


def torch_job(plan: Plan, x_test: np.ndarray, y_test: np.ndarray, epochs: int = 10) -> dict[str, float]:
    """The same job as `jaxintro train` in PyTorch eager: epochs reshuffled, the running training accuracy from the
    batches' own logits, the test set's accuracy after each epoch."""
    import torch

    model = _torch_model(plan)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_all, y_all = torch.from_numpy(plan.x), torch.from_numpy(plan.y.astype(np.int64))
    xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test.astype(np.int64))
    gen = torch.Generator().manual_seed(plan.seed)
    steps = len(plan.x) // plan.batch

    def accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            return sum(int((model(x[i:i + EVAL_CHUNK].float() / 255.0).argmax(1) == y[i:i + EVAL_CHUNK]).sum())
                       for i in range(0, len(x), EVAL_CHUNK)) / len(x)

    train_acc = test_acc = 0.0
    for epoch in range(epochs):
        # The first epoch takes the plan's batches (JAX's permutation); later ones PyTorch's own generator.
        perm = (torch.from_numpy(plan.perm) if epoch == 0 else
                torch.randperm(len(x_all), generator=gen)[: steps * plan.batch].view(steps, plan.batch))
        train_correct = torch.zeros((), dtype=torch.int64)
        for idx in perm:
            opt.zero_grad(set_to_none=True)
            logits = model(x_all[idx].float() / 255.0)
            loss = torch.nn.functional.cross_entropy(logits, y_all[idx])
            loss.backward()
            opt.step()
            train_correct += (logits.detach().argmax(1) == y_all[idx]).sum()
        train_acc, test_acc = int(train_correct) / (steps * plan.batch), accuracy(xt, yt)
    return {"train_accuracy": train_acc, "test_accuracy": test_acc, "peak_rss_mb": peak_rss_mb()}
