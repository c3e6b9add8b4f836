"""Optax recipes: the schedule's shape, the chain's order, and each optimizer's update rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxintro.config import DECAYS_WEIGHTS, OPTIMIZERS, TrainConfig
from jaxintro.optim import build_optimizer, build_schedule, with_hyperparams


def test_warmup_cosine_rises_then_decays_to_zero():
    schedule = build_schedule(TrainConfig(schedule="warmup-cosine", warmup_steps=100, lr=1e-3), total_steps=1000)
    values = np.array([float(schedule(s)) for s in range(0, 1001, 50)])
    assert values[0] == 0.0 and float(schedule(100)) == pytest.approx(1e-3)
    assert np.all(np.diff(values[:3]) > 0) and np.all(np.diff(values[2:]) <= 0)
    assert float(schedule(1000)) == pytest.approx(0.0, abs=1e-9)


def test_constant_adam_is_the_lessons_adam():
    params = {"w": jnp.array([1.0, -2.0])}
    grads = {"w": jnp.array([0.5, 4.0])}
    ours, lesson = build_optimizer(TrainConfig(), 100), optax.adam(1e-3)
    got, _ = ours.update(grads, ours.init(params), params)
    want, _ = lesson.update(grads, lesson.init(params), params)
    np.testing.assert_array_equal(got["w"], want["w"])


def test_clipping_comes_first_in_the_chain():
    params = {"w": jnp.zeros(2)}
    grads = {"w": jnp.array([30.0, 40.0])}  # norm 50
    tx = build_optimizer(TrainConfig(optimizer="sgd", lr=1.0, clip_norm=1.0), 10)
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], [-0.6, -0.8], rtol=1e-6)  # clipped to norm 1, then -lr * g


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_decays_the_weights_exactly_when_the_config_says_so(name):
    """With zero gradients only a weight decay moves a weight: it must move by `--weight-decay` where
    `config.DECAYS_WEIGHTS` says so, and never else (an Optax optimizer with a decay of its own by default, built
    without passing ours, would shrink weights that the tables and the sweeps say no decay touches)."""
    params = {"w": jnp.array([10.0])}
    zero = {"w": jnp.array([0.0])}
    moved = {}
    for decay in (0.0, 0.5):
        tx = build_optimizer(TrainConfig(optimizer=name, lr=0.1, weight_decay=decay), 10)
        updates, _ = tx.update(zero, tx.init(params), params)
        moved[decay] = float(updates["w"][0]) != 0.0
    assert moved == {0.0: False, 0.5: DECAYS_WEIGHTS[name]}


def test_a_peak_given_as_a_value_scales_the_schedules_shape():
    config = TrainConfig(schedule="warmup-cosine", warmup_steps=10, lr=1e-3)
    unit, scaled = build_schedule(config, 100), build_schedule(config, 100, peak=jnp.float32(0.5))
    for step in (0, 5, 10, 50, 99):
        assert float(scaled(step)) == pytest.approx(float(unit(step)) * 500, rel=1e-5), step
    assert float(build_schedule(TrainConfig(lr=2e-3), 100)(37)) == 2e-3  # constant: the rate throughout


def test_a_warm_up_longer_than_the_run_still_reaches_the_peak():
    schedule = build_schedule(TrainConfig(schedule="warmup-cosine", warmup_steps=500, lr=1e-3), total_steps=20)
    assert float(schedule(19)) == pytest.approx(1e-3)  # the warm-up is cut to the run's last step
    assert float(schedule(0)) == 0.0 and 0 < float(schedule(10)) < 1e-3
    one_step = build_schedule(TrainConfig(schedule="warmup-cosine", warmup_steps=5, lr=1e-3), total_steps=1)
    assert float(one_step(0)) == pytest.approx(1e-3)  # a run of one step: no warm-up at all, the peak


def test_a_sweeps_optimizer_carries_each_members_rate_and_decay_in_its_state():
    params, grads = {"w": jnp.array([2.0])}, {"w": jnp.array([1.0])}
    tx = build_optimizer(TrainConfig(optimizer="sgd", lr_grid=(0.1, 0.3), lr=0.1), 10)
    state = tx.init(params)
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(0.1)
    updates, _ = tx.update(grads, with_hyperparams(state, 0.3, 0.0), params)
    np.testing.assert_allclose(updates["w"], [-0.3], rtol=1e-6)  # the member's own rate, not the config's
    adamw = build_optimizer(TrainConfig(optimizer="adamw", lr_grid=(0.1,), weight_decay_grid=(0.0, 0.5), lr=0.1), 10)
    state = with_hyperparams(adamw.init(params), 0.1, 0.5)
    decayed, _ = adamw.update({"w": jnp.array([0.0])}, state, params)
    plain, _ = adamw.update({"w": jnp.array([0.0])}, with_hyperparams(state, 0.1, 0.0), params)
    assert float(decayed["w"][0]) == pytest.approx(-0.1 * 0.5 * 2.0) and float(plain["w"][0]) == 0.0


def test_the_lessons_optimizer_is_optax_adam_itself_state_and_all():
    """Its learning rate an input (`inject_hyperparams`), the lesson's `optax.adam(1e-3)` inside: the same state (no
    schedule count) and the same updates, bit for bit, jitted as the epoch runs them."""
    params, grads = {"w": jnp.array([1.0, -2.0])}, {"w": jnp.array([0.3, -0.7])}
    ours, lesson = build_optimizer(TrainConfig(), 100), optax.adam(1e-3)
    state, theirs = ours.init(params), lesson.init(params)
    assert jax.tree.structure(state.inner_state) == jax.tree.structure(theirs)
    for _step in range(3):
        (mine, state), (want, theirs) = jax.jit(ours.update)(grads, state), jax.jit(lesson.update)(grads, theirs)
        np.testing.assert_array_equal(mine["w"], want["w"])


def test_a_new_learning_rate_is_an_input_of_the_same_program():
    """The rate lives in the optimizer state, so two rates lower to one program (what the compile cache keys on)."""
    params, grads = {"w": jnp.ones(3)}, {"w": jnp.ones(3)}
    texts = [jax.jit(build_optimizer(TrainConfig(lr=lr, clip_norm=1.0), 100).update).lower(
        grads, build_optimizer(TrainConfig(lr=lr, clip_norm=1.0), 100).init(params)).as_text() for lr in (1e-3, 2e-3)]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("sweep", [False, True], ids=["one-model", "sweep"])
def test_a_scheduled_optimizer_warms_up_to_its_own_peak(sweep):
    params, grads = {"w": jnp.array([2.0])}, {"w": jnp.array([1.0])}
    config = TrainConfig(optimizer="sgd", lr=0.1, schedule="warmup-cosine", warmup_steps=1,
                         lr_grid=(0.1, 0.3) if sweep else ())
    tx = build_optimizer(config, 1000)
    state = tx.init(params)
    if sweep:
        state = with_hyperparams(state, 0.3, 0.0)
    first, state = tx.update(grads, state, params)
    second, _ = tx.update(grads, state, params)
    assert float(first["w"][0]) == 0.0  # the warm-up starts from zero
    np.testing.assert_allclose(second["w"], [-0.3 if sweep else -0.1], rtol=1e-4)  # the member's own peak
