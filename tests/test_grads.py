"""Per-example gradients: vmap equals a loop, their mean equals the batch gradient, fast norms equal vmap."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxintro.cli import main
from jaxintro.config import MODEL_OPTIONS
from jaxintro.grads import (example_loss, global_norms, per_example_grad_norms_fast, per_example_grad_norms_for,
                            per_example_grad_norms_loop, per_example_grad_norms_vmap, per_example_grads)
from jaxintro.models import build_model
from jaxintro.models.base import ACTIVATIONS
from jaxintro.lesson import loss_fn


def assert_close(got, want, rtol=1e-5):
    """Relative error in the L2 sense, per array: ||got - want|| <= rtol * ||want||."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.linalg.norm(got - want) <= rtol * np.linalg.norm(want), np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.fixture(scope="module")
def setup():
    model = build_model("jax", 784, (256, 128), 10)
    params = model.init(jax.random.key(0))
    x = jax.random.uniform(jax.random.key(1), (16, 784))
    y = jax.random.randint(jax.random.key(2), (16,), 0, 10)
    return model, params, x, y


@pytest.mark.backend
def test_vmap_equals_a_python_loop_of_grad(setup):
    model, params, x, y = setup
    stacked = per_example_grads(params, model.apply, x, y)
    for i in range(x.shape[0]):
        single = jax.grad(example_loss)(params, model.apply, x[i], y[i])
        for got, want in zip(jax.tree.leaves(stacked), jax.tree.leaves(single)):
            assert_close(got[i], want)


@pytest.mark.backend
def test_mean_of_per_example_grads_is_the_batch_gradient(setup):
    model, params, x, y = setup
    stacked = per_example_grads(params, model.apply, x, y)
    batch = jax.grad(loss_fn)(params, model.apply, x, y)
    for got, want in zip(jax.tree.leaves(stacked), jax.tree.leaves(batch)):
        assert_close(jnp.mean(got, axis=0), want)


@pytest.mark.backend
def test_fast_norms_equal_vmap_and_loop(setup):
    model, params, x, y = setup
    vmapped = per_example_grad_norms_vmap(params, model.apply, x, y)
    np.testing.assert_allclose(per_example_grad_norms_fast(model.dense, params, x, y), vmapped, rtol=1e-5)
    np.testing.assert_allclose(per_example_grad_norms_loop(params, model.apply, x, y), vmapped, rtol=1e-5)
    assert global_norms(per_example_grads(params, model.apply, x, y)).shape == (16,)


@pytest.mark.backend
def test_fast_norms_any_depth():
    model = build_model("jax", 20, (9, 8, 7, 6), 5)
    params = jax.jit(model.init)(jax.random.key(4))
    x = jax.random.normal(jax.random.key(5), (6, 20))
    y = jnp.arange(6) % 5
    vmapped = jax.jit(lambda p, x, y: per_example_grad_norms_vmap(p, model.apply, x, y))  # compiled, as grads.py runs them
    np.testing.assert_allclose(per_example_grad_norms_for(model)(params, x, y), vmapped(params, x, y), rtol=1e-5)


# Every style with each option it takes (`config.MODEL_OPTIONS`), at a value that changes the model where one does,
# and with each activation the models know (`models.base.ACTIVATIONS`: every style's `build` takes one by name), and
# tanh, put in the table by the test: the pure-JAX style's fast norms must follow an activation that is not ReLU.
OPTION_VALUES = {"dropout": (0.0, 0.5), "activation": tuple(sorted({*ACTIVATIONS, "tanh"}))}
STYLE_OPTIONS = [(style, {option: value}) for style, options in MODEL_OPTIONS.items()
                 for option in sorted({*options, "activation"}) for value in OPTION_VALUES[option]]


@pytest.mark.parametrize(("style", "options"), STYLE_OPTIONS, ids=[f"{s}-{o}" for s, o in STYLE_OPTIONS])
def test_the_norms_a_model_gets_are_vmaps_for_every_style_and_option(style, options, monkeypatch):
    """The page's and `grads`' norms (`per_example_grad_norms_for`: the fast ones where the model describes its
    layers) equal `vmap(grad)`'s of the model's own `apply`: a model whose math the fast path did not read (another
    activation, say) would fail here."""
    monkeypatch.setitem(ACTIVATIONS, "tanh", ACTIVATIONS.get("tanh", jnp.tanh))
    model = build_model(style, 12, (7, 5), 4, **options)
    params = jax.jit(model.init)(jax.random.key(6))
    x = jax.random.normal(jax.random.key(7), (5, 12))
    y = jnp.arange(5) % 4
    want = jax.jit(lambda p, x, y: per_example_grad_norms_vmap(p, model.apply, x, y))(params, x, y)
    np.testing.assert_allclose(per_example_grad_norms_for(model)(params, x, y), want, rtol=1e-5)


def test_the_fast_norms_read_the_models_activation():
    """A stack whose activation is not ReLU: the fast norms follow it (they do not write ReLU's math again)."""
    from jaxintro.models import Dense

    model = build_model("jax", 12, (7, 5), 4)
    tanh_model = model._replace(apply=lambda p, x, key=None: _tanh_forward(p, x), dense=model.dense._replace(
        activation=jnp.tanh))
    params = jax.jit(model.init)(jax.random.key(6))
    x, y = jax.random.normal(jax.random.key(7), (5, 12)), jnp.arange(5) % 4
    want = per_example_grad_norms_vmap(params, tanh_model.apply, x, y)
    assert isinstance(tanh_model.dense, Dense)
    np.testing.assert_allclose(per_example_grad_norms_for(tanh_model)(params, x, y), want, rtol=1e-5)


def _tanh_forward(params, x):
    from jaxintro.models.mlp import dense_layers

    *hidden, (w, b) = dense_layers(params)
    for hw, hb in hidden:
        x = jnp.tanh(x @ hw + hb)
    return x @ w + b


def test_grads_command_explains_and_benchmarks(capsys, tmp_path, monkeypatch):
    import jaxintro.experiments as experiments

    # Two timed repeats of each way (7 by default): the report's fields are checked, not the timings.
    monkeypatch.setattr(experiments, "grads_benchmark", functools.partial(experiments.grads_benchmark, repeats=2))
    code = main(["grads", "--dataset", "digits", "--n", "32", "--out", str(tmp_path), "--bench", "--json"])
    assert code == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert len(report["norms"]) == 32 and len(report["indices"]) == 32
    assert report["norms"] == sorted(report["norms"], reverse=True)
    assert sorted(report["indices"]) == list(range(32))
    assert all(0 <= p <= 9 for p in report["predictions"])
    assert "Answer: the 4 largest gradients" in out
    assert report["bench"]["fast_max_rel_diff_vs_vmap"] < 1e-5
    assert set(report["bench"]["ms"]) >= {"loop", "vmap", "fast"}
    assert (tmp_path / "grads.png").read_bytes()[:4] == b"\x89PNG"


def test_n_is_checked_before_any_training(monkeypatch, capsys, tmp_path):
    import jaxintro.experiments as experiments

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking --n")

    monkeypatch.setattr(experiments, "fit", no_training)
    assert main(["grads", "--dataset", "digits", "--n", "361", "--out", str(tmp_path)]) == 2
    assert "--n 361 is more than the 360 test images of digits" in capsys.readouterr().err


def test_an_exploded_runs_norms_print_as_valid_json(monkeypatch, capsys, tmp_path):
    import jaxintro.experiments as experiments

    report = {"norms": [float("inf"), 3.0], "indices": [1, 0], "loss": float("nan")}
    monkeypatch.setattr(experiments, "explain_grads", lambda *args, **kwargs: (report, ["explained"], None))
    assert main(["grads", "--dataset", "digits", "--out", str(tmp_path), "--json"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    assert json.loads(printed, parse_constant=refuse) == {"norms": [None, 3.0], "indices": [1, 0], "loss": None}


def test_the_benchmark_skips_the_pytorch_twin_of_an_activation_it_lacks(monkeypatch):
    """A model whose activation PyTorch's twin does not mirror gets its norms timed and the twin's row skipped with
    the reason, not a traceback (`bench_torch.torch_mlp` refuses it by name)."""
    pytest.importorskip("torch")
    from jaxintro.data import load_dataset
    from jaxintro.experiments import GradsSubject, grads_benchmark

    monkeypatch.setitem(ACTIVATIONS, "tanh", jnp.tanh)
    data = load_dataset("digits", None)
    model = build_model("jax", data.num_features, (8,), data.num_classes, activation="tanh")
    report = grads_benchmark(GradsSubject(model, model.init(jax.random.key(0)), data), n=16, repeats=1)
    assert {"loop", "vmap", "fast"} <= set(report["ms"]) and "torch-func-vmap" not in report["ms"]
    assert report["torch_skipped"] == "the PyTorch twin has no tanh (it mirrors relu)"
