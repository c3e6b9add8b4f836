"""The four model styles: the lesson's exact shapes, the same He-normal init, any-depth forward."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxintro.models import build_model, param_count
from jaxintro.models.base import ACTIVATIONS
from jaxintro.models.mlp import init_params, layer_names, mlp_forward

STYLES = ["jax", "linen", "nnx", "equinox"]
LESSON = (784, 256, 128, 10)



def test_init_params_shapes_and_keys():
    params = init_params(jax.random.key(0))
    assert layer_names(params) == ["layer1", "layer2", "layer3"]
    assert [params[n]["w"].shape for n in layer_names(params)] == [(784, 256), (256, 128), (128, 10)]
    assert all(np.all(params[n]["b"] == 0) for n in params)
    assert param_count(params) == 235_146


def test_he_init_scale():
    params = init_params(jax.random.key(1))
    for name, fan_in in zip(layer_names(params), LESSON[:-1]):
        std = float(jnp.std(params[name]["w"]))
        assert std == pytest.approx(np.sqrt(2.0 / fan_in), rel=0.08 if fan_in < 200 else 0.03)
        assert abs(float(jnp.mean(params[name]["w"]))) < 0.02


@pytest.mark.parametrize("style", STYLES)
def test_every_style_builds_the_lesson_architecture(style):
    model = build_model(style, 784, (256, 128), 10)
    params = model.init(jax.random.key(0))
    assert param_count(params) == 235_146
    shapes = sorted(tuple(sorted(leaf.shape)) for leaf in jax.tree.leaves(params))
    assert shapes == sorted([(10,), (128,), (256,), (10, 128), (128, 256), (256, 784)])
    logits = model.apply(params, jnp.ones((5, 784)), None)
    assert logits.shape == (5, 10)


@pytest.mark.parametrize("style", STYLES)
def test_every_style_uses_untruncated_he_normal(style):
    params = build_model(style, 784, (256, 128), 10).init(jax.random.key(3))
    big = [np.asarray(leaf) for leaf in jax.tree.leaves(params) if leaf.size == 784 * 256][0]
    std = np.sqrt(2.0 / 784)
    assert big.std() == pytest.approx(std, rel=0.02)
    # A truncated normal (cut at 2 std) never goes beyond 2 std; He normal does ~4.6% of the time.
    assert np.mean(np.abs(big) > 2 * std) == pytest.approx(0.0455, abs=0.006)
    biases = [np.asarray(leaf) for leaf in jax.tree.leaves(params) if leaf.ndim == 1]
    assert all(np.all(b == 0) for b in biases)


@pytest.mark.parametrize("style", STYLES)
def test_every_styles_init_under_jit_is_its_op_by_op_draw_bit_for_bit(style):
    """`train` draws the initial weights in one jitted program; the numbers on the lesson's pages were drawn op by
    op. XLA folds the He scale into the sampler's constant unless kept apart (`untruncated_he_normal`): half the
    weights moved."""
    model = build_model(style, 784, (256, 128), 10)
    key = jax.random.key(3)
    for eager, jitted in zip(jax.tree.leaves(model.init(key)), jax.tree.leaves(jax.jit(model.init)(key))):
        np.testing.assert_array_equal(np.asarray(jitted), np.asarray(eager))


@pytest.mark.parametrize("activation", sorted({*ACTIVATIONS, "tanh"}))
@pytest.mark.parametrize("style", STYLES)
def test_every_style_runs_the_activation_it_is_given(style, activation, monkeypatch):
    """Each style computes activation(x w1 + b1) w2 + b2 with its own weights (read back by their unique shapes: 6 in,
    5 hidden, 3 out), for every activation the models know, and for tanh put in the table here: none hard-codes ReLU."""
    monkeypatch.setitem(ACTIVATIONS, "tanh", ACTIVATIONS.get("tanh", jnp.tanh))
    model = build_model(style, 6, (5,), 3, activation=activation)
    params = model.init(jax.random.key(0))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))  # every leaf random, the biases too: they count
    params = jax.tree.unflatten(tree, [jax.random.normal(k, leaf.shape) for k, leaf in zip(keys, leaves)])
    by_size = {tuple(sorted(leaf.shape)): np.asarray(leaf) for leaf in jax.tree.leaves(params)}
    w1, w2 = (by_size[(5, 6)], by_size[(3, 5)])
    w1, w2 = (w1 if w1.shape == (6, 5) else w1.T), (w2 if w2.shape == (5, 3) else w2.T)
    x = np.asarray(jax.random.normal(jax.random.key(2), (4, 6)))
    hidden = np.asarray(ACTIVATIONS[activation](jnp.asarray(x @ w1 + by_size[(5,)])))
    np.testing.assert_allclose(model.apply(params, jnp.asarray(x), None), hidden @ w2 + by_size[(3,)], rtol=1e-5,
                               atol=1e-5)


def test_mlp_forward_any_depth_keeps_layer_order():
    # 12 layers: layer10..layer12 sort before layer2 as strings. Equal widths: a layer in the wrong place still
    # fits, so only the numbers tell (and each shape compiles once, op by op).
    sizes = (6, *[20] * 11, 4)
    params = init_params(jax.random.key(0), sizes)
    assert len(params) == 12
    assert sorted(params)[:4] == ["layer1", "layer10", "layer11", "layer12"]
    x = jax.random.normal(jax.random.key(1), (3, 6))
    h = x
    for i in range(1, 13):  # the explicit loop
        h = h @ params[f"layer{i}"]["w"] + params[f"layer{i}"]["b"]
        if i < 12:
            h = jax.nn.relu(h)
    np.testing.assert_allclose(mlp_forward(params, x), h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("style", STYLES)
def test_dropout_is_random_in_training_and_off_in_evaluation(style):
    model = build_model(style, 16, (64,), 3, dropout=0.5)
    params = model.init(jax.random.key(0))
    x = jnp.ones((4, 16))
    eval_a, eval_b = model.apply(params, x, None), model.apply(params, x, None)
    np.testing.assert_array_equal(eval_a, eval_b)
    train_a = model.apply(params, x, jax.random.key(1))
    train_b = model.apply(params, x, jax.random.key(2))
    assert not np.allclose(train_a, train_b)
    np.testing.assert_array_equal(train_a, model.apply(params, x, jax.random.key(1)))


@pytest.mark.parametrize("style", STYLES)
def test_an_activation_no_model_knows_is_refused_by_name(style):
    from jaxintro.errors import ConfigError

    with pytest.raises(ConfigError, match="there is no activation 'swish': the models know relu"):
        build_model(style, 6, (5,), 3, activation="swish")
