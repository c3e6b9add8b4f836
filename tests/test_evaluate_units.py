"""evaluate.py, pinned exactly and fast: what a run's answers come from, in words; its accuracy, per class and in a
confusion matrix; `evaluate`'s opening lines; chunked predictions; a run reloaded from its checkpoint (for `make
mutation`: every small change to evaluate.py should fail a test here within seconds, with no training: the runs
and data are made by hand, and the end-to-end checks on real digits are test_evaluate.py's)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxintro import evaluate
from jaxintro.checkpoint import Checkpointer
from jaxintro.config import TrainConfig
from jaxintro.data import Dataset, DatasetInfo
from jaxintro.errors import CheckpointError, ConfigError
from jaxintro.evaluate import LoadedRun, evaluate_run, evaluation_lines, load_run, predict_all, predict_proba
from jaxintro.grid import Choice, Setting, mean_std
from jaxintro.members import ensemble_model
from jaxintro.models import build_model
from jaxintro.optim import build_optimizer
from jaxintro.train import TrainState


def exactly(text: str) -> str:
    """A `match=` pattern that accepts `text` whole and nothing else."""
    return f"^{re.escape(text)}$"


# ---------------------------------------------------------------- a tiny MLP whose answers NumPy can check

# Images of 2x2 pixels, four classes, one hidden layer of 3. Every member shares the hidden layer (ReLU matters:
# it cuts -0.5 to 0 for the last image) and has its own output layer. Found by a search so that on IMAGES the three
# members score 0.25, 0.5 and 0.75, the ensembles used below score apart from them, no prediction is within 0.03
# probability of a tie (float32 rounding cannot flip an argmax), no test image is of class 3 ("three") yet member
# 2 predicts it once (a confusion matrix that is not symmetric, and a class with no test image).
W1 = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [-0.5, 1.0, 0.5]], np.float32)
B1 = np.zeros(3, np.float32)
W2 = np.array([[[-1.0, -2.0, -3.0, 1.0], [1.0, 2.5, 3.0, 2.5], [-3.0, -2.5, 0.5, 1.0]],
               [[2.5, 2.5, -2.0, 1.0], [-1.5, 2.5, -1.0, -1.0], [1.5, -0.5, 2.0, 2.0]],
               [[-0.5, -1.0, -2.5, 0.0], [-2.5, 2.5, 2.5, 3.0], [-1.0, 3.0, 2.5, 1.5]]], np.float32)
B2 = np.array([[-1.0, -2.0, 0.5, 0.5], [1.0, 0.0, 2.0, 1.0], [1.0, -0.5, 0.5, -1.0]], np.float32)
IMAGES = (255 * np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 0],
                          [1, 1, 1, 1], [0, 0, 0, 1]])).astype(np.uint8)
LABELS = np.array([0, 1, 2, 0, 2, 1, 1, 2], np.int32)
CLASSES = ("zero", "one", "two", "three")  # names, not indices: the per-class report is keyed by them
ACCURACY = {(0,): 0.25, (1,): 0.5, (2,): 0.75, (0, 2): 0.375, (0, 1, 2): 0.625}  # of each member and ensemble

DATA = Dataset("toy", IMAGES, LABELS, IMAGES, LABELS, CLASSES, (2, 2), "hand-made")
INFO = DatasetInfo("toy", (2, 2), CLASSES, 4)
MEMBER = build_model("jax", 4, (3,), 4)  # what `model_for` builds for the configs below on DATA
ENSEMBLE = ensemble_model(MEMBER)  # one object: `predict_proba` compiles once per model, not once per test

ONE = TrainConfig(hidden=(3,))
SEEDS = TrainConfig(hidden=(3,), seeds=3, seed=5, lr=3e-4)  # seeds 5, 6, 7, not the members' indices
SWEEP = TrainConfig(hidden=(3,), lr_grid=(1e-3, 3e-3), seeds=2, seed=5)
SWEEP3 = TrainConfig(hidden=(3,), lr_grid=(1e-3, 3e-3), seeds=3)
SWEEP_WD = TrainConfig(hidden=(3,), optimizer="adamw", lr_grid=(1e-3,), weight_decay_grid=(0.0, 1e-4))

TAIL = " (8 images; the per-class figures and the confusion matrix below are its)"


def member_params(k: int | None) -> dict:
    """Member k's parameters (None: a member that diverged, every weight NaN)."""
    w2, b2 = (W2[k], B2[k]) if k is not None else (np.full_like(W2[0], np.nan), np.full_like(B2[0], np.nan))
    return {"layer1": {"w": jnp.asarray(W1), "b": jnp.asarray(B1)},
            "layer2": {"w": jnp.asarray(w2), "b": jnp.asarray(b2)}}


def stacked(members: list[int | None]) -> dict:
    """The hand-made members' parameters stacked on a leading axis, as a run of several members holds them."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *[member_params(k) for k in members])


def numpy_probs(used: tuple[int, ...], images: np.ndarray = IMAGES) -> np.ndarray:
    """The members' averaged class probabilities, by NumPy in float64."""
    hidden = np.maximum(images.astype(np.float64) / 255 @ W1 + B1, 0.0)
    logits = np.stack([hidden @ W2[k].astype(np.float64) + B2[k] for k in used])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return (probs / probs.sum(-1, keepdims=True)).mean(0)


def one_model(k: int = 2, epoch: int = 1) -> LoadedRun:
    """A run of one model: hand-made member k."""
    return LoadedRun(ONE, MEMBER, member_params(k), epoch, INFO)


def members_run(config: TrainConfig, members: list[int | None], choice: Choice, epoch: int = 1) -> LoadedRun:
    """A run of several members (`members[m]`: which hand-made member member m is, None: diverged), used through
    `choice.used`, built as `members.use_run` builds it: their ensemble, or the one member's own model."""
    used = [members[m] for m in choice.used]
    model, params = (ENSEMBLE, stacked(used)) if len(used) > 1 else (MEMBER, member_params(used[0]))
    return LoadedRun(config, model, params, epoch, INFO, MEMBER, stacked(members), choice)


def sweep_choice(config: TrainConfig, accuracies: list[float], used: list[int], diverged: list[int],
                 left_out: int) -> Choice:
    """The `Choice` of a sweep used through the setting of its member `used[0]`, as `grid.choose_members` makes it."""
    index = used[0] // config.seeds  # a setting is `seeds` consecutive members: learning rate, then weight decay
    lrs, decays = config.lr_grid or (config.lr,), config.weight_decay_grid or (config.weight_decay,)
    own = accuracies[index * config.seeds:(index + 1) * config.seeds]
    setting = Setting(lrs[index // len(decays)], decays[index % len(decays)], own, *mean_std(own))
    return Choice(used, setting, diverged, left_out)


def test_the_hand_made_members_score_as_the_tables_say_with_no_near_tie():
    # Every expected number below is read from these tables: they must hold by NumPy first.
    for used, accuracy in ACCURACY.items():
        probs = numpy_probs(used)
        assert float(np.mean(probs.argmax(-1) == LABELS)) == accuracy
        top_two = np.sort(probs, -1)[:, -2:]
        assert (top_two[:, 1] - top_two[:, 0]).min() > 0.03
    assert list(numpy_probs((2,)).argmax(-1)) == [0, 2, 2, 3, 2, 1, 1, 2]
    assert 3 not in LABELS


# ---------------------------------------------------------------- what a run's answers come from, in words


@pytest.mark.parametrize("config, choice, expected", [
    (SEEDS, Choice([0, 1, 2], None, [], 0), "the ensemble of its 3 members"),
    (SEEDS, Choice([0, 2], None, [1], 1), "the ensemble of its 2 members, 1 diverged member left out"),
    (SEEDS, Choice([1], None, [0, 2], 2), "its one member that trained, 2 diverged members left out"),
    (TrainConfig(seeds=2), Choice([1], None, [0], 1), "its one member that trained, 1 diverged member left out"),
    (SWEEP, sweep_choice(SWEEP, [0.5, 0.6, 0.7, 0.8], [2, 3], [], 0), "the setting lr=0.003, its 2 seeds averaged"),
    (SWEEP, sweep_choice(SWEEP, [0.5, 0.6, 0.7, math.nan], [2], [3], 1),
     "the setting lr=0.003, one model, 1 diverged member left out"),
    # A member that diverged in another setting is not one of this setting's: nothing is said of it.
    (SWEEP, sweep_choice(SWEEP, [0.5, 0.6, 0.7, math.nan], [0, 1], [3], 0),
     "the setting lr=0.001, its 2 seeds averaged"),
    (SWEEP_WD, sweep_choice(SWEEP_WD, [0.5, 0.6], [1], [], 0), "the setting lr=0.001,wd=0.0001, one model"),
    (SWEEP3, sweep_choice(SWEEP3, [0.5, 0.5, 0.5, math.nan, 0.6, math.nan], [4], [3, 5], 2),
     "the setting lr=0.003, one model, 2 diverged members left out"),
])
def test_a_run_of_several_members_says_which_of_them_answer(config, choice, expected):
    run = LoadedRun(config, MEMBER, None, 1, INFO, MEMBER, None, choice)
    assert run.describe_use() == expected
    assert run.usage_note() == expected  # predict, serve and grads --run say it too
    assert run.members == config.members


def test_one_model_answers_alone_and_has_no_usage_note():
    run = one_model()
    assert run.describe_use() == "one model"
    assert run.usage_note() is None
    assert run.members == 1


# ---------------------------------------------------------------- predictions, a chunk of images at a time


def test_predicted_probabilities_are_the_models_softmax_of_the_images_scaled_to_one():
    probs = predict_proba(one_model(), IMAGES)
    assert type(probs) is np.ndarray and probs.shape == (8, 4) and probs.dtype == np.float32
    np.testing.assert_allclose(probs, numpy_probs((2,)), rtol=1e-5, atol=1e-6)


def test_an_ensembles_predicted_probabilities_are_its_members_averaged():
    run = members_run(SEEDS, [0, None, 2], Choice([0, 2], None, [1], 1))
    np.testing.assert_allclose(predict_proba(run, IMAGES), numpy_probs((0, 2)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk, sizes", [(3, [3, 3, 2]), (4, [4, 4]), (7, [7, 1]), (100, [8])])
def test_a_whole_set_is_predicted_chunk_images_at_a_time_and_joined_in_order(monkeypatch, chunk, sizes):
    run, calls = one_model(), []
    one_call = evaluate.predict_proba
    monkeypatch.setattr(evaluate, "predict_proba", lambda loaded, x: (calls.append(len(x)), one_call(loaded, x))[1])
    probs = predict_all(run, IMAGES, chunk)
    assert calls == sizes  # a bounded forward pass; a last partial chunk, never an image twice or left out
    np.testing.assert_allclose(probs, one_call(run, IMAGES), rtol=1e-6, atol=1e-7)  # the same as one call
    np.testing.assert_allclose(probs, numpy_probs((2,)), rtol=1e-5, atol=1e-6)


def test_a_set_smaller_than_the_default_chunk_is_one_call(monkeypatch):
    calls = []
    one_call = evaluate.predict_proba
    monkeypatch.setattr(evaluate, "predict_proba", lambda loaded, x: (calls.append(len(x)), one_call(loaded, x))[1])
    assert predict_all(one_model(), IMAGES).shape == (8, 4)
    assert calls == [8]


# ---------------------------------------------------------------- accuracy, per class and the confusion matrix


def test_one_models_report_is_its_accuracy_per_class_and_a_confusion_matrix_of_true_rows_and_predicted_columns():
    report = evaluate_run(one_model(), DATA)
    assert set(report) == {"test_accuracy", "per_class_accuracy", "confusion"}  # no member figures for one model
    assert report["test_accuracy"] == 0.75 and type(report["test_accuracy"]) is float
    # Member 2 predicts 0 2 2 3 2 1 1 2 for labels 0 1 2 0 2 1 1 2. No image is a "three": 0, not NaN.
    assert report["per_class_accuracy"] == {"zero": 1 / 2, "one": 2 / 3, "two": 1.0, "three": 0.0}
    assert list(report["per_class_accuracy"]) == list(CLASSES)
    assert report["confusion"].tolist() == [[1, 0, 0, 1],
                                            [0, 2, 1, 0],
                                            [0, 0, 3, 0],
                                            [0, 0, 0, 0]]
    assert report["confusion"].dtype == np.int64  # counts, printed and written as integers


@pytest.mark.parametrize("images", [slice(0, 8), slice(0, 3), slice(1, 3), slice(3, 5)])
def test_per_class_accuracy_is_each_classes_share_of_its_own_images_and_zero_for_a_class_with_none(images):
    # The first three images are one of each class but "three": a class of one image, where a per-class
    # figure divided by anything but its count would show.
    x, y = IMAGES[images], LABELS[images]
    data = DATA._replace(x_test=x, y_test=y)
    report = evaluate_run(one_model(), data)
    predicted = numpy_probs((2,), x).argmax(-1)
    assert report["test_accuracy"] == float(np.mean(predicted == y))
    assert report["per_class_accuracy"] == {
        name: float(np.mean(predicted[y == c] == c)) if np.any(y == c) else 0.0 for c, name in enumerate(CLASSES)}
    confusion = np.zeros((4, 4), int)
    for true, guess in zip(y, predicted):
        confusion[true, guess] += 1
    np.testing.assert_array_equal(report["confusion"], confusion)


def test_several_members_report_the_ensembles_figures_and_each_members_own_accuracy():
    report = evaluate_run(members_run(SEEDS, [0, 1, 2], Choice([0, 1, 2], None, [], 0)), DATA)
    assert report["test_accuracy"] == ACCURACY[(0, 1, 2)]
    assert report["member_test_accuracy"] == [0.25, 0.5, 0.75]
    predicted = numpy_probs((0, 1, 2)).argmax(-1)
    expected = np.zeros((4, 4), int)
    np.add.at(expected, (LABELS, predicted), 1)
    np.testing.assert_array_equal(report["confusion"], expected)


def test_a_diverged_member_scores_nan_and_the_ensemble_is_of_those_used():
    report = evaluate_run(members_run(SEEDS, [0, None, 2], Choice([0, 2], None, [1], 1)), DATA)
    assert set(report) == {"test_accuracy", "per_class_accuracy", "confusion", "member_test_accuracy"}
    assert report["test_accuracy"] == ACCURACY[(0, 2)]
    np.testing.assert_equal(report["member_test_accuracy"], [0.25, math.nan, 0.75])
    predicted = numpy_probs((0, 2)).argmax(-1)
    assert report["per_class_accuracy"] == {
        name: float(np.mean(predicted[LABELS == c] == c)) if c < 3 else 0.0 for c, name in enumerate(CLASSES)}


def test_data_of_another_size_is_refused_naming_the_data_the_run_trained_on():
    wide = Dataset("bigger", np.zeros((2, 9), np.uint8), np.zeros(2, np.int32), np.zeros((2, 9), np.uint8),
                   np.zeros(2, np.int32), CLASSES, (3, 3), "hand-made")
    with pytest.raises(CheckpointError, match=exactly("the run was trained on toy (4 pixels), not bigger (9); "
                                                      "pass --dataset toy")):
        evaluate_run(one_model(), wide)


# ---------------------------------------------------------------- `evaluate`'s opening lines


@pytest.mark.parametrize("epoch, epochs", [(1, "1 epoch"), (3, "3 epochs")])
def test_one_models_lines_are_its_model_epochs_data_and_accuracy(epoch, epochs):
    run = one_model(epoch=epoch)
    assert evaluation_lines(run, evaluate_run(run, DATA), Path("runs/toy"), DATA, chosen=False) == [
        f"runs/toy: jax MLP after {epochs} on toy",
        "Test accuracy: 75.00% (8 images)",
    ]


@pytest.mark.parametrize("epoch, epochs", [(1, "1 epoch"), (2, "2 epochs")])
def test_a_seeds_runs_lines_are_each_member_a_diverged_one_so_named_their_mean_and_the_ensembles_accuracy(epoch,
                                                                                                         epochs):
    run = members_run(SEEDS, [0, None, 2], Choice([0, 2], None, [1], 1), epoch)
    assert evaluation_lines(run, evaluate_run(run, DATA), Path("runs/seeds"), DATA, chosen=False) == [
        f"runs/seeds: 3 jax MLPs after {epochs} on toy",
        "  member   0 (seed 5, lr 0.0003):  25.00%",
        "  member   1 (seed 6, lr 0.0003): diverged",
        "  member   2 (seed 7, lr 0.0003):  75.00%",
        "Members: 50.00 ± 35.36% (mean ± std of those that trained)",  # of 25 and 75: the diverged one left out
        "Test accuracy of the ensemble of its 2 members, 1 diverged member left out: 37.50%" + TAIL,
    ]


def test_a_seeds_run_with_one_member_left_shows_its_accuracy_and_no_spread():
    run = members_run(SEEDS, [None, 1, None], Choice([1], None, [0, 2], 2))
    report = {"test_accuracy": 0.625, "member_test_accuracy": [math.nan, 0.625, math.nan]}
    assert evaluation_lines(run, report, Path("r"), DATA, chosen=False)[4] == (
        "Members: 62.50% (the only one that trained)")  # not "62.50 ± 0.00%": one value has no spread


def test_every_members_accuracy_is_shown_to_two_decimals_in_a_column_of_six():
    run = members_run(SEEDS, [0, 1, 2], Choice([0, 1, 2], None, [], 0))
    report = {"test_accuracy": 0.123456, "member_test_accuracy": [1.0, 0.05, 0.98765]}
    assert evaluation_lines(run, report, Path("r"), DATA, chosen=False) == [
        "r: 3 jax MLPs after 1 epoch on toy",
        "  member   0 (seed 5, lr 0.0003): 100.00%",
        "  member   1 (seed 6, lr 0.0003):   5.00%",
        "  member   2 (seed 7, lr 0.0003):  98.77%",
        "Members: 67.92 ± 54.50% (mean ± std of those that trained)",
        "Test accuracy of the ensemble of its 3 members: 12.35%" + TAIL,
    ]


@pytest.mark.parametrize("accuracies, used, diverged, left_out, chosen, expected", [
    ([0.5, 0.625, 0.75, 1.0], [2, 3], [], 0, False, [
        "Setting used: lr=0.003 (the best; choose another with --setting): its seeds 87.50 ± 17.68%",
        "Test accuracy of the setting lr=0.003, its 2 seeds averaged: 87.50%" + TAIL]),
    ([0.5, 0.625, 0.75, 1.0], [0, 1], [], 0, True, [
        "Setting used: lr=0.001 (chosen with --setting): its seeds 56.25 ± 8.84%",
        "Test accuracy of the setting lr=0.001, its 2 seeds averaged: 87.50%" + TAIL]),
    ([0.5, math.nan, 0.75, 1.0], [0], [1], 1, True, [
        "Setting used: lr=0.001 (chosen with --setting): 50.00%",  # one seed left: no spread
        "Test accuracy of the setting lr=0.001, one model, 1 diverged member left out: 87.50%" + TAIL]),
])
def test_a_sweeps_lines_name_the_setting_used_and_its_own_seeds_mean_never_a_mean_across_settings(
        accuracies, used, diverged, left_out, chosen, expected):
    run = members_run(SWEEP, [0, 1, 2, 2], sweep_choice(SWEEP, accuracies, used, diverged, left_out))
    # The test accuracy is the report's (0.875 here, whatever the members' figures): the lines only show it.
    report: dict[str, Any] = {"test_accuracy": 0.875, "member_test_accuracy": accuracies}
    score = {0.5: " 50.00%", 0.625: " 62.50%", 0.75: " 75.00%", 1.0: "100.00%"}
    assert evaluation_lines(run, report, Path("runs/sweep"), DATA, chosen=chosen) == [
        "runs/sweep: 4 jax MLPs after 1 epoch on toy",
        f"  member   0 (seed 5, lr 0.001): {score[accuracies[0]]}",
        f"  member   1 (seed 6, lr 0.001): {score.get(accuracies[1], 'diverged')}",
        f"  member   2 (seed 5, lr 0.003): {score[accuracies[2]]}",
        f"  member   3 (seed 6, lr 0.003): {score[accuracies[3]]}",
        *expected,
    ]


def test_a_weight_decay_sweeps_setting_is_named_with_its_weight_decay():
    run = members_run(SWEEP_WD, [0, 2], sweep_choice(SWEEP_WD, [0.25, 0.75], [1], [], 0), epoch=4)
    report = {"test_accuracy": 0.75, "member_test_accuracy": [0.25, 0.75]}
    assert evaluation_lines(run, report, Path("wd"), DATA, chosen=False) == [
        "wd: 2 jax MLPs after 4 epochs on toy",
        "  member   0 (seed 0, lr 0.001):  25.00%",
        "  member   1 (seed 0, lr 0.001):  75.00%",
        "Setting used: lr=0.001,wd=0.0001 (the best; choose another with --setting): 75.00%",
        "Test accuracy of the setting lr=0.001,wd=0.0001, one model: 75.00%" + TAIL,
    ]


# ---------------------------------------------------------------- a run reloaded from its checkpoint


def save_run(run_dir: Path, config: TrainConfig, members: list[int | None], epoch: int, metrics: list[dict],
             dataset: DatasetInfo | None) -> Path:
    """A checkpoint of hand-made parameters, as `train` saves one (no training: the numbers stay NumPy's)."""
    tx = build_optimizer(config, 1)
    if config.members == 1:
        params = member_params(members[0])
        state = TrainState(params, tx.init(params), jax.random.key(0), epoch)
    else:
        opt_state = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[tx.init(member_params(k)) for k in members])
        state = TrainState(stacked(members), opt_state, jax.random.split(jax.random.key(0), config.members), epoch)
    saver = Checkpointer(run_dir)
    saver.save(state, config, metrics, None if dataset is None else dataset.to_json())
    saver.close()
    return run_dir


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """One model (member 2) after 2 epochs; a sweep of members 0 2 | 1 and a diverged one after 3; a checkpoint
    older than the dataset record."""
    root = tmp_path_factory.mktemp("evaluate-runs")
    sweep_row = {"epoch": 3, "members": {"test_accuracy": [0.25, 0.75, 0.5, None]}}
    return {"one": save_run(root / "one", ONE, [2], 2, [{"epoch": 2}], INFO),
            "sweep": save_run(root / "sweep", SWEEP, [0, 2, 1, None], 3, [sweep_row], INFO),
            "old": save_run(root / "old", ONE, [2], 1, [{"epoch": 1}], None)}


def assert_params_equal(a: Any, b: Any) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_reloaded_run_of_one_model_is_that_model_its_epoch_and_its_data(saved):
    run = load_run(saved["one"])
    assert (run.config, run.epoch, run.dataset) == (ONE, 2, INFO)
    assert (run.model.name, run.model.sizes) == ("jax", (4, 3, 4))
    assert (run.member_model, run.all_params, run.choice) == (None, None, None)
    assert_params_equal(run.params, member_params(2))
    assert evaluate_run(run, DATA)["test_accuracy"] == ACCURACY[(2,)]


def test_a_run_of_one_model_refuses_a_setting(saved):
    with pytest.raises(ConfigError, match=exactly("--setting chooses one setting of a sweep; this run is not a sweep: "
                                                  "drop --setting")):
        load_run(saved["one"], "lr=0.001")


def test_a_reloaded_sweep_is_used_through_its_best_setting_that_lost_no_seed(saved):
    run = load_run(saved["sweep"])
    assert (run.config, run.epoch, run.dataset) == (SWEEP, 3, INFO)
    assert (run.choice.used, run.choice.setting.lr, run.choice.diverged, run.choice.left_out) == ([0, 1], 1e-3, [3], 0)
    assert (run.model.name, run.member_model.name, run.member_model.sizes) == ("ensemble of jax", "jax", (4, 3, 4))
    assert_params_equal(run.params, stacked([0, 2]))
    assert_params_equal(run.all_params, stacked([0, 2, 1, None]))
    assert run.describe_use() == "the setting lr=0.001, its 2 seeds averaged"
    np.testing.assert_allclose(predict_proba(run, IMAGES), numpy_probs((0, 2)), rtol=1e-5, atol=1e-6)


def test_a_reloaded_sweep_is_used_through_the_setting_asked_for(saved):
    run = load_run(saved["sweep"], "lr=0.003")
    assert (run.config, run.epoch, run.dataset) == (SWEEP, 3, INFO)
    assert (run.choice.used, run.choice.setting.lr, run.choice.left_out) == ([2], 3e-3, 1)
    assert run.model.name == "jax"  # one member left: its own model, no ensemble of one
    assert_params_equal(run.params, member_params(1))
    assert run.describe_use() == "the setting lr=0.003, one model, 1 diverged member left out"
    np.testing.assert_allclose(predict_proba(run, IMAGES), numpy_probs((1,)), rtol=1e-5, atol=1e-6)


def test_a_checkpoint_that_does_not_say_its_data_is_refused_with_the_fix(saved):
    with pytest.raises(CheckpointError, match=exactly(f"{saved['old']}: its checkpoint does not say which data it was "
                                                      "trained on; retrain it")):
        load_run(saved["old"])
