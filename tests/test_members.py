"""members.py, pinned exactly and fast: where members go, how they start, how their epoch is mapped, what their
ensemble computes and which of them a trained run is used through (for `make mutation`: every small change to
members.py should fail a test here within seconds; the slow end-to-end checks are test_ensemble.py's)."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from conftest import synthetic_dataset
from jaxintro import members
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError, TrainingDivergedError
from jaxintro.grid import Choice, Setting
from jaxintro.members import (
    Members,
    abstract_carry,
    average_probabilities,
    cpu_devices_wanted,
    ensemble_accuracy,
    ensemble_model,
    group_size,
    init_members,
    map_epoch,
    member_accuracies,
    member_devices,
    member_log_probs,
    members_and_ensemble,
    members_diverged,
    refuse_processes,
    spread_over,
    use_run,
)
from jaxintro.models import Model, build_model, model_for
from jaxintro.optim import build_optimizer
from jaxintro.parallel import MEMBERS, make_mesh
from jaxintro.record import Scores, headline_over, members_row
from jaxintro.train import TrainState, fit

SWEEP = dict(lr_grid=(1e-3, 3e-3), seeds=2)


def exactly(text: str) -> str:
    """A `match=` pattern that accepts `text` whole and nothing else."""
    return f"^{re.escape(text)}$"


def key_data(keys: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(keys))


def member(tree, k: int):
    return jax.tree.map(lambda leaf: leaf[k], tree)


def host(leaf) -> np.ndarray:
    """A leaf as NumPy (a PRNG key as its bits)."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return key_data(leaf)
    return np.asarray(leaf)


def assert_trees_equal(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(host(x), host(y))


# ---------------------------------------------------------------- a linear model whose answers NumPy can check

# The `jax` MLP with no hidden layer: logits = x / 255 @ w + b. Three members, found by a search so that on IMAGES
# they score 0.25, 0.5 and 0.75, their ensembles below score apart from each of them, and no prediction is within
# 0.02 probability of a tie (float32 rounding cannot flip an argmax).
W = np.array([[[1.0, 2.5, -3.0], [-2.5, 2.0, 1.5], [1.0, -0.5, -3.0]],
              [[1.0, -2.5, 0.5], [-1.0, 2.0, 2.0], [-2.5, 1.5, -0.5]],
              [[0.0, 1.5, -3.0], [3.0, 3.0, 0.5], [-1.0, -0.5, 1.5]]], np.float32)
B = np.array([[-0.5, -1.0, -1.5], [0.0, 1.0, -0.5], [0.0, 0.5, 1.5]], np.float32)
IMAGES = (255 * np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1], [0, 0, 0]])
          ).astype(np.uint8)
LABELS = np.array([0, 1, 2, 0, 2, 1, 1, 2], np.int32)
MEMBER_ACCURACIES = [0.25, 0.5, 0.75]
ENSEMBLE_ACCURACIES = {(0, 1, 2): 0.375, (0, 2): 0.625}


def linear_model() -> Model:
    return build_model("jax", 3, (), 3)


def linear_params() -> dict:
    return {"layer1": {"w": jnp.asarray(W), "b": jnp.asarray(B)}}


def numpy_log_probs(k: int) -> np.ndarray:
    logits = IMAGES.astype(np.float64) / 255 @ W[k].astype(np.float64) + B[k]
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def numpy_ensemble(used) -> np.ndarray:
    return np.log(np.mean([np.exp(numpy_log_probs(k)) for k in used], 0))


def test_the_hand_made_members_score_as_numpy_says():
    # The tables above are what the tests below compare with: they must hold by NumPy first.
    assert [float(np.mean(numpy_log_probs(k).argmax(-1) == LABELS)) for k in range(3)] == MEMBER_ACCURACIES
    for used, accuracy in ENSEMBLE_ACCURACIES.items():
        assert float(np.mean(numpy_ensemble(used).argmax(-1) == LABELS)) == accuracy


# ---------------------------------------------------------------- before JAX starts its devices

SEVERAL_PROCESSES = ("several members (--seeds > 1, or a sweep) train in one process, spread over its devices; "
                     "drop --coordinator, --num-processes and --process-id")


@pytest.mark.parametrize("config, processes", [(TrainConfig(seeds=2), 2), (TrainConfig(**SWEEP), 3)])
def test_several_members_refuse_several_processes_in_one_line(config, processes):
    with pytest.raises(ConfigError, match=exactly(SEVERAL_PROCESSES)):
        refuse_processes(config, processes)


@pytest.mark.parametrize("config, processes", [(TrainConfig(seeds=2), 1), (TrainConfig(), 2), (TrainConfig(), 1)])
def test_one_model_or_one_process_is_never_refused(config, processes):
    assert refuse_processes(config, processes) is None


@pytest.mark.parametrize("fields, available, devices", [
    (dict(seeds=8, devices=4), 1, 4),  # told: as many as asked, whatever is available
    (dict(seeds=4, devices=2), 1, 2),
    (dict(seeds=4), 4, 4),  # as many as there are members, when there are cores enough
    (dict(seeds=4), 3, 2),  # the most that split 4 evenly, not 3
    (dict(seeds=8), 4, 4),  # never more than available
    (dict(seeds=6), 4, 3),
    (dict(seeds=3), 2, 1),
    (dict(seeds=7), 16, 7),  # never more than the members
    (dict(seeds=1), 4, 1),
    (dict(lr_grid=(1e-3, 3e-3), seeds=3), 16, 6),  # every member of the grid counts
])
def test_members_spread_over_the_most_devices_that_split_them_evenly(fields, available, devices):
    assert spread_over(TrainConfig(**fields), available) == devices


def test_the_cpu_devices_wanted_are_devices_for_one_model_and_the_cores_members_fill(monkeypatch):
    monkeypatch.setattr(members, "usable_cores", lambda: 2)
    assert cpu_devices_wanted(TrainConfig()) == 1
    assert cpu_devices_wanted(TrainConfig(devices=4)) == 4  # one model: its data-parallel devices
    assert [cpu_devices_wanted(TrainConfig(seeds=n)) for n in (2, 3, 8)] == [2, 1, 2]
    assert cpu_devices_wanted(TrainConfig(seeds=8, devices=4)) == 4
    monkeypatch.setattr(members, "usable_cores", lambda: 16)
    assert [cpu_devices_wanted(TrainConfig(seeds=n)) for n in (12, 40)] == [12, 10]


def test_member_devices_are_the_cpu_devices_that_split_them_and_one_accelerator(monkeypatch):
    monkeypatch.setattr(jax, "devices", lambda *backend: ["cpu"] * 4)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert [member_devices(TrainConfig(seeds=n)) for n in (8, 6, 3, 1)] == [4, 3, 3, 1]
    assert member_devices(TrainConfig(seeds=8, devices=2)) == 2
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert member_devices(TrainConfig(seeds=8)) == 1  # vmapped on its one device, though JAX sees four
    assert member_devices(TrainConfig(seeds=8, devices=2)) == 2


@pytest.mark.parametrize("backend, fields, devices, group", [
    ("cpu", dict(seeds=8), 1, 1),  # CPU_MEMBER_GROUP
    ("cpu", dict(seeds=8), 2, 1),
    ("cpu", dict(seeds=8, member_group=8), 1, 8),
    ("cpu", dict(seeds=2, member_group=16), 1, 2),  # never more than there are
    ("cpu", dict(seeds=8, member_group=8), 2, 4),  # never more than a device's share
    ("cpu", dict(seeds=8, member_group=3), 2, 3),
    ("gpu", dict(seeds=8), 1, 8),  # an accelerator vmaps all its members
    ("gpu", dict(seeds=8), 2, 4),
    ("gpu", dict(seeds=6), 4, 1),  # a share is a whole number of members
    ("gpu", dict(seeds=8, member_group=3), 1, 3),
])
def test_a_group_is_the_flag_else_a_devices_share_on_an_accelerator_and_one_on_a_cpu(monkeypatch, backend, fields,
                                                                                     devices, group):
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    # One device is the default argument: asked without it, so that the default is pinned too.
    size = group_size(TrainConfig(**fields), devices) if devices != 1 else group_size(TrainConfig(**fields))
    assert (size, type(size)) == (group, int)  # an int: `lax.map`'s batch_size


# ---------------------------------------------------------------- the members layout


def tiny_init(config: TrainConfig):
    """A tiny MLP, its optimizer, and its single run's whole start taken op by op, the reference (`one(seed)`: the
    key split as `train` splits it, the weights, then the optimizer's state)."""
    model = build_model("jax", 3, (4,), 2)
    tx = build_optimizer(config, 10)

    def one(seed: int) -> tuple:
        init_key, key = jax.random.split(jax.random.key(seed))
        params = model.init(init_key)
        return params, tx.init(params), key

    return model, tx, one


@pytest.mark.backend
@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_members_start_stacked_each_as_its_single_run_bit_for_bit(impl):
    """Member k of seeds 5, 6, 7 (drawn by one jitted program) is seed 5 + k drawn op by op, whatever the PRNG."""
    config = TrainConfig(seeds=3, seed=5)
    model, tx, one = tiny_init(config)
    with jax.default_prng_impl(impl):
        params, opt_state, keys = init_members(config, model)
        singles = [one(5 + k) for k in range(3)]
    assert keys.shape == (3,)
    for k, (one_params, one_opt_state, one_key) in enumerate(singles):
        assert_trees_equal(member(params, k), one_params)
        assert_trees_equal(member(opt_state, k), one_opt_state)  # no hyper-parameters put in: not a sweep
        np.testing.assert_array_equal(key_data(keys[k]), key_data(one_key))


def test_the_draw_compiles_once_a_process_per_model_and_prng():
    """A second run of the same model in one process (a test, a notebook) compiles no initial-weights program, even
    with the persistent cache off; a new PRNG is traced anew (jit alone would keep the first one's keys)."""
    from jaxintro.layout import jitted_draw

    compiles = []

    def listen(event: str, seconds: float, **kwargs) -> None:
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    cache_on = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        config = TrainConfig(dataset="digits", hidden=(7,))
        first = model_for(config, 5, 3)
        jitted_draw(first)(np.uint32(1))
        before = len(compiles)
        again = model_for(dataclasses.replace(config, lr=0.5), 5, 3)  # another run's config, the same model
        assert again is first
        params, _key = jitted_draw(again)(np.uint32(2))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
        jax.config.update("jax_enable_compilation_cache", cache_on)
    assert len(compiles) == before and params["layer1"]["w"].shape == (5, 7)
    with jax.default_prng_impl("rbg"):
        _params, key = jitted_draw(again)(np.uint32(2))
    assert jax.random.key_impl(key) == jax.random.key_impl(jax.random.key(0, impl="rbg"))


@pytest.mark.parametrize("x64", [False, True])
def test_a_sweeps_members_carry_their_own_learning_rate_and_weight_decay(x64):
    config = TrainConfig(lr_grid=(1e-3, 3e-3), weight_decay_grid=(0.0, 0.1), optimizer="adamw", seed=2)
    model, tx, one = tiny_init(config)
    with jax.enable_x64(x64):  # JAX_ENABLE_X64=1 makes float64 the default: the rates stay float32, as the steps
        params, opt_state, keys = init_members(config, model)
    hyper = opt_state.hyperparams
    assert (hyper["learning_rate"].dtype, hyper["weight_decay"].dtype) == (jnp.float32, jnp.float32)
    np.testing.assert_array_equal(hyper["learning_rate"], np.float32([1e-3, 1e-3, 3e-3, 3e-3]))
    np.testing.assert_array_equal(hyper["weight_decay"], np.float32([0.0, 0.1, 0.0, 0.1]))
    one_params, one_opt_state, _key = one(2)
    for k in range(4):
        assert_trees_equal(member(params, k), one_params)
        assert_trees_equal(member(opt_state.inner_state, k), one_opt_state.inner_state)


def test_the_abstract_carry_is_one_models_own_or_every_leaf_with_a_member_axis():
    params, opt_state, _key = tiny_init(TrainConfig())[2](0)
    one = abstract_carry(1, params, opt_state)
    assert len(one) == 3 and one[0] is params and one[1] is opt_state
    np.testing.assert_array_equal(key_data(one[2]), key_data(jax.random.key(0)))
    stacked_params, stacked_opt_state, keys = abstract_carry(3, params, opt_state)
    for abstract, concrete in ((stacked_params, params), (stacked_opt_state, opt_state)):
        assert jax.tree.structure(abstract) == jax.tree.structure(concrete)
        for a, c in zip(jax.tree.leaves(abstract), jax.tree.leaves(concrete)):
            assert isinstance(a, jax.ShapeDtypeStruct)
            assert (a.shape, a.dtype) == ((3, *c.shape), c.dtype)
    np.testing.assert_array_equal(key_data(keys), key_data(jax.random.split(jax.random.key(0), 3)))
    assert abstract_carry(2, params, opt_state)[0]["layer1"]["w"].shape == (2, 3, 4)


def toy_epoch(params, opt_state, batches, dropout_key, x_u8, y):
    """An epoch whose every output depends on its every input, elementwise: mapped, it is exact."""
    noise = jax.random.uniform(dropout_key, params["w"].shape)
    return ({"w": params["w"] * 2 + x_u8.astype(jnp.float32).sum() + noise + batches.sum()}, opt_state + y.sum(),
            {"loss": params["w"].sum()})


def toy_inputs(count: int = 3) -> tuple:
    """A member's parameters, optimizer state, batches and dropout key (each with a member axis); the shared data."""
    return ({"w": jnp.arange(4 * count, dtype=jnp.float32).reshape(count, 4)}, jnp.arange(count, dtype=jnp.int32),
            jnp.arange(2 * count, dtype=jnp.int32).reshape(count, 2), jax.random.split(jax.random.key(1), count),
            jnp.ones((5, 2), jnp.uint8), jnp.arange(5, dtype=jnp.int32))


@pytest.mark.parametrize("group, scans, reshapes", [(0, ["3"], 0), (2, ["1"], 7)], ids=["one-at-a-time", "vmap-2"])
def test_the_mapped_epoch_is_each_members_own_epoch_in_groups_with_its_state_donated(group, scans, reshapes):
    mesh = make_mesh(1, MEMBERS)
    mapped = map_epoch(toy_epoch, TrainConfig(seeds=3, member_group=group), mesh)
    # A group of one is a plain lax.map over the 3 members (no vmap, no reshape); a group of 2 is one scan step
    # of 2 vmapped members and the remainder.
    text = str(jax.make_jaxpr(mapped)(*toy_inputs()))
    assert (re.findall(r"length=(\d+)", text), text.count("reshape")) == (scans, reshapes)
    inputs = toy_inputs()
    expected = [toy_epoch(*member(inputs[:4], k), *inputs[4:]) for k in range(3)]
    params, opt_state, metrics = mapped(*inputs)
    for k in range(3):
        want_params, want_opt_state, want_metrics = expected[k]
        np.testing.assert_array_equal(params["w"][k], want_params["w"])
        assert int(opt_state[k]) == int(want_opt_state)
        assert float(metrics["loss"][k]) == float(want_metrics["loss"])
    # The parameters and optimizer states are donated; the plan (batches, keys) and the shared data are not.
    assert [leaf.is_deleted() for leaf in jax.tree.leaves(inputs)] == [True, True, False, False, False, False]


def test_spread_members_are_each_devices_share_mapped_in_a_group_of_that_share_on_an_accelerator(monkeypatch):
    # This process has one device: the two-device program is traced over an abstract mesh (test_ensemble.py runs
    # one for real). Four members, two per device, split along `members`; the data is shared whole. An
    # accelerator vmaps a device's share, 2 here (not all 4): one scan step of a group of two.
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    mapped = map_epoch(toy_epoch, TrainConfig(seeds=4), AbstractMesh((2,), (MEMBERS,)))
    text = str(jax.make_jaxpr(mapped)(*toy_inputs(4)))
    spread = "P('members',)"
    assert f"in_specs=({spread}, {spread}, {spread}, {spread}, P(), P())" in text
    assert f"out_specs=({spread}, {spread}, {spread})" in text
    assert re.findall(r"length=(\d+)", text) == ["1"]
    assert re.findall(r"new_sizes=\(([\d, ]*)\)", text)[:4] == ["1, 2, 4", "1, 2", "1, 2, 2", "1, 2"]


def linear_members(config: TrainConfig = TrainConfig(seeds=3)) -> Members:
    model = linear_model()
    return Members(config, model, build_optimizer(config, 10))


def test_the_members_layout_is_a_members_mesh_holding_each_member_once():
    config = TrainConfig(seeds=3)
    model, tx, one = tiny_init(config)
    layout = Members(config, model, tx)
    assert (layout.config, layout.model, layout.tx) == (config, model, tx)
    assert layout.mesh.axis_names == (MEMBERS,) and layout.mesh.size == 1 and layout.copies == 1
    params = layout.init()[0]
    assert_trees_equal(params, init_members(config, model)[0])
    for k in range(3):  # seeds 0, 1, 2
        assert_trees_equal(member(params, k), one(k)[0])


def test_members_are_placed_spread_the_training_set_replicated_and_the_test_set_on_the_first_device():
    layout = linear_members()
    data = synthetic_dataset(n_train=16, n_test=8, side=2)
    params = linear_params()
    state = TrainState(params, {"moment": jnp.ones(3)}, jax.random.split(jax.random.key(0), 3), 7)
    placed, train, test = layout.place(state, data)
    assert placed.epoch == 7
    for leaf in jax.tree.leaves((placed.params, placed.opt_state, placed.key)):
        assert leaf.sharding == NamedSharding(layout.mesh, P(MEMBERS))
    assert_trees_equal(placed.params, params)
    for array, given in zip(train, (data.x_train, data.y_train)):
        assert array.sharding == NamedSharding(layout.mesh, P())
        np.testing.assert_array_equal(array, given)
    for array, given in zip(test, (data.x_test, data.y_test)):
        assert array.sharding == SingleDeviceSharding(layout.mesh.devices.flat[0])
        np.testing.assert_array_equal(array, given)


def numpy_nll(log_probs: np.ndarray) -> float:
    return float(-log_probs[np.arange(len(LABELS)), LABELS].sum())


def test_every_member_and_their_ensemble_is_scored_and_a_diverged_member_is_nan_and_left_out():
    score = linear_members().jit_eval()
    params, x, y = linear_params(), jnp.asarray(IMAGES), jnp.asarray(LABELS)
    correct, loss = score(params, x, y)
    assert correct.shape == loss.shape == (4,)
    assert np.asarray(correct).tolist() == [2, 4, 6, 3]  # 0.25, 0.5, 0.75 and the ensemble's 0.375 of 8
    np.testing.assert_allclose(loss, [numpy_nll(numpy_log_probs(k)) for k in range(3)]
                               + [numpy_nll(numpy_ensemble((0, 1, 2)))], rtol=1e-5)
    correct, loss = score(params, x, y, [1])
    assert math.isnan(loss[1]) and np.isfinite(np.asarray(loss)[[0, 2, 3]]).all()
    assert np.asarray(correct)[[0, 2, 3]].tolist() == [2, 6, 5]  # the ensemble of members 0 and 2: 0.625
    np.testing.assert_allclose(np.asarray(loss)[[0, 2, 3]], [numpy_nll(numpy_log_probs(k)) for k in (0, 2)]
                               + [numpy_nll(numpy_ensemble((0, 2)))], rtol=1e-5)
    assert np.isfinite(np.asarray(params["layer1"]["w"])).all()  # the caller's parameters are not touched


def test_a_member_that_diverges_is_warned_about_once_and_added_to_the_diverged():
    diverged: set[int] = set()
    metrics = {"loss": np.array([[1.0, 0.5], [0.9, np.nan], [0.8, 0.7]], np.float32)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        linear_members().check_epoch(metrics, np.array([1.0, 1.0, np.inf, 1.0]), 3, 2, diverged)
    left_out = "it is reported as NaN and left out of the means and the ensemble"
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, f"member 1 diverged: loss became nan at epoch 3, step 2 of 2; {left_out}"),
        (RuntimeWarning, f"member 2 diverged: the test loss became inf after epoch 3; {left_out}"),
    ]
    assert diverged == {1, 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        linear_members().check_epoch(metrics, np.array([1.0, 1.0, np.inf, 1.0]), 3, 2, diverged)  # not again
    with pytest.raises(TrainingDivergedError, match="loss became nan at epoch 4, step 1 of 5"):
        linear_members().check_epoch({"loss": np.full((3, 2), np.nan)}, np.ones(4), 4, 5, {0, 1})


METRICS = {"loss": np.array([[1.0, 0.5], [2.0, 1.0], [0.4, 0.2], [3.0, 1.0]], np.float32),
           "correct": np.array([[1, 2], [2, 2], [0, 1], [2, 1]], np.int32),
           "grad_norm": np.array([[0.5, 2.0], [1.0, 1.5], [3.0, 0.1], [0.25, 0.5]], np.float32)}


def seeds_row_inputs(count: int) -> tuple:
    metrics = {name: values[:count] for name, values in METRICS.items()}
    return metrics, np.array([3, 2, 4, 6, 5][:count] + [5]), np.array([4.0, 8.0, 2.0, 6.0, 1.0][:count] + [1.0])


def test_a_seeds_runs_row_is_every_members_numbers_and_their_ensemble():
    layout = linear_members(TrainConfig(seeds=3, batch_size=2, epochs=12))
    metrics, test_correct, test_loss = seeds_row_inputs(3)
    row = layout.epoch_row(4, metrics, Scores(test_correct, test_loss, 8), learning_rate=5e-4, seconds=1.5,
                           diverged={1})
    expected = members_row(4, metrics, Scores(test_correct, test_loss, 8), learning_rates=[5e-4] * 3, seconds=1.5,
                           batch_size=2, diverged={1})
    assert row.as_row() == expected.as_row()
    assert row.members["train_accuracy"][0] == 0.75 and row.members["test_accuracy"][2] == 0.5  # batches of 2
    assert (row.test_accuracy, row.ensemble_test_accuracy, row.seconds) == (0.4375, 0.625, 1.5)
    assert row.members["learning_rate"] == pytest.approx([5e-4] * 3, rel=1e-12)
    assert layout.used_at(row) == Choice([0, 2], None, [1], 1)
    assert layout.epoch_line(row) == ("Epoch   4 | Loss: 0.5250 ± 0.3182 | Train Acc: 0.5000 ± 0.3536 | "
                                      "Test Acc: 0.4375 ± 0.0884 | Ensemble: 0.6250 | lr 5.00e-04 | 1.50s")


def test_a_sweeps_row_and_line_are_its_best_settings_seeds_at_their_own_learning_rate():
    config = TrainConfig(**SWEEP, lr=2e-3, batch_size=2, epochs=3)
    layout = linear_members(config)
    metrics, test_correct, test_loss = seeds_row_inputs(4)
    row = layout.epoch_row(2, metrics, Scores(test_correct, test_loss, 8), learning_rate=4e-3, seconds=0.5,
                           diverged=set())
    # Each member's rate is the schedule's at this step, scaled from `lr` to its own.
    assert row.members["learning_rate"] == pytest.approx([2e-3, 2e-3, 6e-3, 6e-3], rel=1e-12)
    expected = headline_over(members_row(2, metrics, Scores(test_correct, test_loss, 8),
                                         learning_rates=row.members["learning_rate"], seconds=0.5,
                                         batch_size=2, diverged=set()), [2, 3])
    assert row == expected
    assert row.test_accuracy == 0.625 and row.ensemble_test_accuracy is None
    assert row.learning_rate == pytest.approx(6e-3, rel=1e-12)
    choice = layout.used_at(row)
    assert choice == Choice([2, 3], Setting(3e-3, config.weight_decay, [0.5, 0.75], 0.625, choice.setting.std), [], 0)
    assert choice.setting.std == pytest.approx(math.sqrt(0.03125))
    assert layout.epoch_line(row) == ("Epoch  2 | best: lr=0.003 | Loss: 1.1500 ± 1.2021 | "
                                      "Train Acc: 0.5000 ± 0.3536 | Test Acc: 0.6250 ± 0.1768 | lr 6.00e-03 | 0.50s")


# ---------------------------------------------------------------- the ensemble

LOG = np.log


def test_the_ensemble_averages_probabilities_image_by_image_leaving_out_nan_and_inf_members():
    # Three members, four images, two classes.
    log_probs = np.array([
        [LOG([0.2, 0.8]), LOG([0.3, 0.7]), [np.nan, LOG(0.3)], [np.nan, np.nan]],
        [LOG([0.6, 0.4]), [np.nan, np.nan], LOG([0.9, 0.1]), [np.inf, 0.0]],
        [[-np.inf, 0.0], LOG([0.5, 0.5]), [np.inf, LOG(0.5)], [0.0, np.inf]],
    ], np.float32)
    averaged = jax.jit(average_probabilities)(jnp.asarray(log_probs))
    assert averaged.shape == (4, 2) and averaged.dtype == jnp.float32
    expected = [
        LOG([(0.2 + 0.6 + 0.0) / 3, (0.8 + 0.4 + 1.0) / 3]),  # a probability of 0 (-inf) is a valid member's
        LOG([(0.3 + 0.5) / 2, (0.7 + 0.5) / 2]),  # member 1 is NaN here, and only here
        LOG([0.9, 0.1]),  # one NaN entry or one +inf entry leaves a member out: one left, itself
        [-np.inf, -np.inf],  # none left: probability 0 everywhere, never NaN
    ]
    np.testing.assert_allclose(averaged, expected, rtol=1e-6)


def test_the_left_out_members_gradient_is_zero_and_every_gradient_finite():
    log_probs = jnp.asarray(np.array([[LOG([0.2, 0.8]), LOG([0.3, 0.7])],
                                      [[np.nan, np.nan], LOG([0.6, 0.4])],
                                      [LOG([0.5, 0.5]), [np.inf, 0.0]]], np.float32))
    grad = np.asarray(jax.jit(jax.grad(lambda lp: average_probabilities(lp)[:, 0].sum()))(log_probs))
    assert np.isfinite(grad).all() and not grad[1, 0].any() and not grad[2, 1].any()
    # d/d lp_k of log(mean_k p_k) is p_k / sum_k p_k for the members kept.
    np.testing.assert_allclose(grad[:, 0, 0], [0.2 / 0.7, 0.0, 0.5 / 0.7], rtol=1e-6)
    np.testing.assert_allclose(grad[:, 1, 0], [0.3 / 0.9, 0.6 / 0.9, 0.0], rtol=1e-6)


def test_a_confident_mistake_stays_finite_where_the_naive_mean_underflows():
    log_probs = np.array([[[-200.0, 0.0]], [[-120.0, 0.0]]], np.float32)
    with np.errstate(divide="ignore"):
        assert np.log(np.mean(np.exp(log_probs), 0))[0, 0] == -np.inf  # float32 e^-120 is 0
    np.testing.assert_allclose(jax.jit(average_probabilities)(jnp.asarray(log_probs)),
                               [[np.logaddexp(-200.0, -120.0) - np.log(2), 0.0]], rtol=1e-6)


def test_each_members_log_probabilities_are_its_own_log_softmax_for_the_same_images():
    params, x = linear_params(), jnp.asarray(IMAGES / 255.0, jnp.float32)
    log_probs = jax.jit(member_log_probs, static_argnums=0)(linear_model(), params, x)
    assert log_probs.shape == (3, 8, 3)
    for k in range(3):
        np.testing.assert_allclose(log_probs[k], numpy_log_probs(k), rtol=1e-5, atol=1e-6)


def test_the_ensemble_is_a_model_named_for_its_members_that_cannot_be_initialised():
    model = linear_model()
    params, x = linear_params(), jnp.asarray(IMAGES / 255.0, jnp.float32)
    ensemble, both = ensemble_model(model), members_and_ensemble(model)
    assert (ensemble.name, ensemble.sizes) == ("ensemble of jax", (3, 3))
    assert (both.name, both.sizes) == ("members and ensemble of jax", (3, 3))
    for built in (ensemble, both):
        with pytest.raises(TypeError, match=exactly("an ensemble is built from trained members, not initialised")):
            built.init(jax.random.key(0))
    # Compiled, as they are used (`count_correct`); op by op each would compile its every operation.
    averaged = jax.jit(ensemble.apply)(params, x)
    np.testing.assert_allclose(averaged, numpy_ensemble((0, 1, 2)), rtol=1e-5, atol=1e-6)
    rows = jax.jit(both.apply)(params, x)
    assert rows.shape == (4, 8, 3)
    for k in range(3):
        np.testing.assert_allclose(rows[k], numpy_log_probs(k), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rows[3], averaged, rtol=1e-6)


def test_the_ensembles_accuracy_is_that_of_its_used_members_averaged_and_one_members_its_own():
    accuracy = ensemble_accuracy(linear_model(), linear_params(), [0, 2], IMAGES, LABELS)
    assert (accuracy, type(accuracy)) == (ENSEMBLE_ACCURACIES[(0, 2)], float)
    assert ensemble_accuracy(linear_model(), linear_params(), [1], IMAGES, LABELS) == MEMBER_ACCURACIES[1]


def test_each_members_accuracy_is_its_own_and_a_diverged_members_is_nan():
    assert member_accuracies(linear_model(), linear_params(), [], IMAGES, LABELS) == MEMBER_ACCURACIES
    accuracies = member_accuracies(linear_model(), linear_params(), [1], IMAGES, LABELS)
    assert len(accuracies) == 3 and math.isnan(accuracies[1])
    assert (accuracies[0], accuracies[2]) == (0.25, 0.75)


# ---------------------------------------------------------------- which members a trained run is used through


def test_a_member_diverged_when_a_parameter_is_not_finite_or_it_has_no_finite_accuracy():
    w = np.ones((6, 2, 2), np.float32)
    w[1, 1, 0] = np.nan
    b = np.zeros((6,), np.float32)
    b[4] = np.inf
    params = {"w": jnp.asarray(w), "b": jnp.asarray(b)}
    assert members_diverged(params, [0.9, 0.9, None, math.nan, 0.9, 0.0]) == [1, 2, 3, 4]
    assert members_diverged(params, [0.9, 0.9, 0.9, 0.9, 0.9, math.inf]) == [1, 4, 5]
    assert members_diverged({"w": jnp.ones((2, 3))}, [0.5, 0.5]) == []


def meta_of(*rows: list) -> dict:
    return {"metrics": [{"members": {"test_accuracy": accuracies}} for accuracies in rows]}


def test_a_seeds_run_is_used_through_the_ensemble_of_every_member_that_trained():
    model, params = linear_model(), linear_params()
    used = use_run(TrainConfig(seeds=3), model, params, meta_of([0.1, 0.1, None], [0.5, 0.6, 0.7]), None)
    assert set(used) == {"model", "params", "member_model", "all_params", "choice"}
    assert used["choice"] == Choice([0, 1, 2], None, [], 0)  # the last epoch's row counts
    assert used["model"].name == "ensemble of jax" and used["member_model"] is model and used["all_params"] is params
    assert_trees_equal(used["params"], params)
    np.testing.assert_allclose(jax.jit(used["model"].apply)(used["params"], jnp.asarray(IMAGES / 255.0, jnp.float32)),
                               numpy_ensemble((0, 1, 2)), rtol=1e-5, atol=1e-6)
    nan_params = jax.tree.map(lambda leaf: leaf.at[1].set(jnp.nan), params)
    used = use_run(TrainConfig(seeds=3), model, nan_params, meta_of([0.5, 0.6, 0.7]), None)
    assert used["choice"] == Choice([0, 2], None, [1], 1)
    assert_trees_equal(used["params"], member(params, jnp.array([0, 2])))


def test_a_run_left_with_one_member_is_used_through_that_members_own_model():
    model, params = linear_model(), linear_params()
    used = use_run(TrainConfig(seeds=3), model, params, meta_of([None, 0.6, math.nan]), None)
    assert used["choice"] == Choice([1], None, [0, 2], 2)
    assert used["model"] is model
    assert_trees_equal(used["params"], member(params, 1))  # no member axis left


def test_a_run_with_no_accuracies_has_no_member_to_use():
    with pytest.raises(ConfigError, match=exactly("every member of this run diverged, so there is nothing to predict "
                                                  "with; retrain it with a lower --lr")):
        use_run(TrainConfig(seeds=3), linear_model(), linear_params(), {}, None)


def sweep_params() -> dict:
    """Four members: the linear members 0, 1, 2 and 1 again."""
    return jax.tree.map(lambda leaf: leaf[jnp.array([0, 1, 2, 1])], linear_params())


def test_a_sweep_is_used_through_its_best_settings_seeds_or_the_setting_asked_for():
    config, model, params = TrainConfig(**SWEEP), linear_model(), sweep_params()
    meta = meta_of([0.9, 0.9, 0.1, 0.1], [0.5, 0.6, 0.8, 0.9])
    used = use_run(config, model, params, meta, None)
    assert used["choice"].used == [2, 3] and used["choice"].setting.lr == 3e-3
    assert used["model"].name == "ensemble of jax"
    assert_trees_equal(used["params"], member(params, jnp.array([2, 3])))
    assert use_run(config, model, params, meta, "lr=0.001")["choice"].used == [0, 1]
    # A setting that lost a seed is not the best, and its diverged seed is never used.
    nan_params = jax.tree.map(lambda leaf: leaf.at[3].set(jnp.nan), params)
    meta = meta_of([0.5, 0.6, 0.8, None])
    assert use_run(config, model, nan_params, meta, None)["choice"].used == [0, 1]
    asked = use_run(config, model, nan_params, meta, "lr=0.003")
    assert asked["choice"].used == [2] and asked["choice"].left_out == 1 and asked["model"] is model
    assert_trees_equal(asked["params"], member(params, 2))


# ---------------------------------------------------------------- one tiny training: members are the single runs

SMALL = dict(dataset="digits", batch_size=64, hidden=(8,), epochs=1)


@pytest.fixture(scope="module")
def trained():
    """`--seeds 2 --seed 5` and the single run `--seed 6`, one epoch on 256 tiny images."""
    data = synthetic_dataset(n_train=256, n_test=64, side=8)
    lines: list[str] = []
    run = fit(TrainConfig(**SMALL, seed=5, seeds=2), data, log=lines.append)
    single = fit(TrainConfig(**SMALL, seed=6), data, log=lambda line: None)
    return data, run, single, lines


def test_member_k_of_a_seeds_run_is_the_run_with_seed_k_bit_for_bit(trained):
    data, run, single, lines = trained
    assert_trees_equal(member(run.state.params, 1), single.state.params)
    assert_trees_equal(member(run.state.opt_state, 1), single.state.opt_state)
    np.testing.assert_array_equal(key_data(run.state.key[1]), key_data(single.state.key))
    row = run.history[-1]
    assert row.members["loss"][1] == single.history[-1].loss
    assert row.members["test_accuracy"][1] == single.history[-1].test_accuracy
    # Different seeds are different models, so the checks above could fail.
    assert np.abs(np.asarray(run.state.params["layer1"]["w"][0] - run.state.params["layer1"]["w"][1])).max() > 0.05
    assert lines == [row.line(1)]


def test_a_trained_runs_accuracies_are_what_its_members_and_ensemble_score(trained):
    data, run, _single, _lines = trained
    model = model_for(TrainConfig(**SMALL), 64, 10)
    row = run.history[-1]
    assert member_accuracies(model, run.state.params, [], data.x_test, data.y_test) == row.members["test_accuracy"]
    assert ensemble_accuracy(model, run.state.params, [0, 1], data.x_test, data.y_test) == row.ensemble_test_accuracy


def test_a_restored_sweep_is_used_through_the_setting_its_held_out_images_chose():
    """`evaluate`, `predict` and `serve` (`use_run`) and the sweep's ensemble figure (`best_setting_ensemble`) take
    the setting the held-out images chose, here the first, though the test set would have taken the second."""
    from jaxintro.report import best_setting_ensemble

    config = TrainConfig(lr_grid=(1e-3, 3e-3), seeds=1, validation=100)
    last = {"epoch": 2, "members": {"test_accuracy": [0.90, 0.95], "val_accuracy": [0.97, 0.93]}}
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    used = members.use_run(config, "model", params, {"metrics": [last]}, None)
    assert used["choice"].used == [0] and used["params"]["w"].tolist() == [0.0, 1.0, 2.0]
    assert best_setting_ensemble(config, last, params, dataset=None) == 0.90  # its one model's test accuracy


def test_a_sweep_says_how_it_chose_and_what_the_test_set_would_have_read():
    from jaxintro.report import held_out_line

    summary = {"validation_images": 5000, "best_val_accuracy": 0.9823,
               "best": {"lr": 1e-3, "weight_decay": None, "test_accuracy": 0.9770},
               "test_chosen": {"lr": 3e-4, "weight_decay": None, "test_accuracy": 0.9797}}
    config = TrainConfig(lr_grid=(3e-4, 1e-3), seeds=2, validation=5000)
    assert held_out_line(config, summary) == (
        "Chosen on 5,000 held-out training images (98.23% there), never on the test set. Chosen on the test set, "
        "lr=0.0003 would read 97.97%, +0.27 points: a number its own choice inflates.")
    summary["test_chosen"] = {**summary["best"]}
    assert held_out_line(config, summary).endswith("the test set would have chosen the same setting.")


def test_a_sweeps_report_takes_the_held_out_choice_and_names_the_test_sets_by_its_setting():
    """Every field of the report follows the held-out images (here the first setting) where the test set would take
    the second; the test set's choice is named as `--setting` takes it, weight decay included."""
    from types import SimpleNamespace

    from jaxintro.report import SweepReport, held_out_line

    config = TrainConfig(optimizer="adamw", weight_decay_grid=(1e-4, 1e-2), seeds=1, validation=100)
    last = {"epoch": 2, "members": {"test_accuracy": [0.90, 0.95], "val_accuracy": [0.97, 0.93],
                                    "train_accuracy": [0.9, 0.9], "loss": [0.1, 0.1], "test_loss": [0.3, 0.2]}}
    report = SweepReport(config)
    assert report.used_members(last) == [0]
    fields = report.fields(last, SimpleNamespace(samples_per_second=2.0, state=SimpleNamespace(params=None)), None,
                           Path("."), spread=1, primary=False, clock={})
    assert (fields["best"]["weight_decay"], fields["best"]["test_accuracy"]) == (1e-4, 0.90)
    assert fields["best_val_accuracy"] == 0.97 and fields["ensemble_test_accuracy"] == 0.90
    assert fields["test_chosen"] == {"lr": 1e-3, "weight_decay": 1e-2, "test_accuracy": 0.95}
    assert "Chosen on the test set, lr=0.001,wd=0.01 would read 95.00%, +5.00 points" in held_out_line(config, fields)


def test_a_setting_with_one_seed_left_shows_its_accuracy_and_no_spread():
    from jaxintro.report import SweepReport

    report = SweepReport(TrainConfig(lr_grid=(1e-3, 3e-3), seeds=3))
    cell = {"test_accuracy": 0.9, "test_accuracy_std": 0.0}
    assert report.setting_cell({**cell, "diverged": 2}) == "90.00%"
    assert report.setting_cell({**cell, "diverged": 1}) == "90.00 ± 0.00%"  # two seeds left: a spread
    assert report.setting_cell({**cell, "diverged": 0}) == "90.00 ± 0.00%"  # three seeds that agree: a spread


def test_member_k_is_its_single_run_with_the_rbg_prng_too():
    """`JAX_DEFAULT_PRNG_IMPL=rbg` (a supported choice, docs/reliability.md): a `vmap` over rbg keys draws other bits
    than the keys one by one, so each member's shuffle is drawn as its single run's (`members.map_plan`)."""
    before = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        data = synthetic_dataset(n_train=256, n_test=64, side=8)
        run = fit(TrainConfig(**SMALL, seed=5, seeds=3), data, log=lambda line: None)
        single = fit(TrainConfig(**SMALL, seed=7), data, log=lambda line: None)
    finally:
        jax.config.update("jax_default_prng_impl", before)
    assert_trees_equal(member(run.state.params, 2), single.state.params)
    assert run.history[-1].members["loss"][2] == single.history[-1].loss
