"""grid.py and record.py, the rules every command reads a run's members and epochs by: plain numbers, no JAX, so
each rule is pinned here directly (and mutation-tested fast: `make mutation`)."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from jaxintro import grid, record
from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError, TrainingDivergedError
from jaxintro.grid import Member, Setting, diverged_in

SWEEP = TrainConfig(lr_grid=(1e-3, 3e-3), seeds=2, seed=5)
SWEEP_WD = TrainConfig(lr_grid=(1e-3,), weight_decay_grid=(0.0, 1e-4), seeds=2, optimizer="adamw")


def test_the_grid_is_settings_by_learning_rate_then_weight_decay_with_consecutive_seeds():
    assert grid.member_grid(SWEEP) == [Member(5, 1e-3, SWEEP.weight_decay), Member(6, 1e-3, SWEEP.weight_decay),
                                       Member(5, 3e-3, SWEEP.weight_decay), Member(6, 3e-3, SWEEP.weight_decay)]
    assert [(m.lr, m.weight_decay) for m in grid.member_grid(SWEEP_WD)] == [(1e-3, 0.0), (1e-3, 0.0),
                                                                            (1e-3, 1e-4), (1e-3, 1e-4)]
    one = TrainConfig(seed=3, lr=2e-3, weight_decay=0.5)
    assert grid.member_grid(one) == [Member(3, 2e-3, 0.5)]  # one model: the grid of one member


def test_mean_and_std_leave_out_what_did_not_train():
    assert grid.mean_std([0.5, 0.7]) == pytest.approx((0.6, math.sqrt(0.02)))  # ddof=1
    assert grid.mean_std([0.5, None, math.nan, math.inf, 0.7]) == pytest.approx((0.6, math.sqrt(0.02)))
    assert grid.mean_std([0.9]) == (0.9, 0.0)
    mean, std = grid.mean_std([None, math.nan])
    assert math.isnan(mean) and math.isnan(std)
    assert all(math.isnan(v) for v in grid.mean_std([]))


def test_settings_group_members_in_grid_order_with_nan_for_a_diverged_one():
    settings = grid.summarize_settings(grid.member_grid(SWEEP), [0.90, 0.92, None, 0.95])
    first, second = settings
    assert (first.lr, first.accuracies, first.diverged) == (1e-3, [0.90, 0.92], 0)
    assert math.isnan(second.accuracies[0]) and second.accuracies[1] == 0.95 and second.diverged == 1
    assert first.mean == pytest.approx(0.91) and first.std == pytest.approx(math.sqrt(2e-4))
    assert (second.mean, second.std) == (0.95, 0.0)  # over its one survivor


def setting(lr: float, accuracies: list[float]) -> Setting:
    return Setting(lr, 0.0, accuracies, *grid.mean_std(accuracies))


def test_the_best_setting_is_the_highest_mean_among_those_that_lost_no_seed():
    whole, higher_but_lost_one = setting(1e-3, [0.90, 0.92]), setting(3e-3, [math.nan, 0.99])
    for order in ([whole, higher_but_lost_one], [higher_but_lost_one, whole]):
        assert grid.best_setting(order) is whole
    better = setting(2e-3, [0.95, 0.93])
    assert grid.best_setting([whole, better, higher_but_lost_one]) is better
    tie = setting(5e-3, [0.92, 0.90])
    assert grid.best_setting([whole, tie]) is whole and grid.best_setting([tie, whole]) is tie  # the first listed
    all_lost = [setting(1e-3, [math.nan, 0.80]), setting(3e-3, [0.85, math.nan]), setting(5e-3, [math.nan, math.nan])]
    assert grid.best_setting(all_lost) is all_lost[1]  # every setting lost a seed: the best mean of survivors
    assert grid.best_setting(all_lost[::-1]) is all_lost[1]  # a NaN mean never wins


def test_a_rows_headline_is_its_best_settings_mean_and_a_single_runs_own_number():
    row = {"test_accuracy": 0.5, "members": {"test_accuracy": [0.90, 0.92, None, 0.99], "loss": [0.3, 0.2, None, 0.1]}}
    assert grid.headline_accuracy(SWEEP, row) == pytest.approx(0.91)  # not 0.99: that setting lost a seed
    assert grid.headline_accuracy(TrainConfig(seeds=4), row) == 0.5  # several seeds: the row's own mean
    assert grid.headline_accuracy(SWEEP, {"test_accuracy": 0.7}) == 0.7  # a row without members
    assert grid.headline_accuracy(SWEEP, {"members": {"test_accuracy": [None] * 4}}) is None
    assert grid.diverged_in(row) == [2] and grid.diverged_in({"test_accuracy": 0.5}) == []
    # An epoch of a run with held-out images before its end: no test number yet, and the diverged member still known.
    held_out = {"members": {"val_accuracy": [0.9, 0.8, None, 0.7], "loss": [0.3, 0.2, None, 0.1]}}
    assert grid.headline_accuracy(SWEEP, held_out) is None and grid.diverged_in(held_out) == [2]
    assert [s.lr for s in grid.settings_of(SWEEP, row)] == [1e-3, 3e-3]


def test_a_setting_is_named_and_found_as_the_flag_writes_it():
    settings = grid.summarize_settings(grid.member_grid(SWEEP_WD), [0.9, 0.9, 0.8, 0.8])
    assert [grid.setting_name(SWEEP_WD, s) for s in settings] == ["lr=0.001,wd=0", "lr=0.001,wd=0.0001"]
    assert grid.setting_name(SWEEP, setting(3e-3, [0.9])) == "lr=0.003"  # adam: no weight decay to name
    assert grid.parse_setting("lr=3e-4") == (3e-4, None)
    assert grid.parse_setting(" lr=3e-4 , wd=1e-4 ") == (3e-4, 1e-4)
    for bad in ("lr=abc", "lr=1e-3,lr=2e-3", "rate=1e-3", "lr=1e-3,wd=", "lr"):
        with pytest.raises(ConfigError) as refused:
            grid.parse_setting(bad)
        assert str(refused.value) == ("--setting must read lr=VALUE or lr=VALUE,wd=VALUE (e.g. lr=3e-4); "
                                      f"got {bad!r}")
    with pytest.raises(ConfigError) as refused:
        grid.parse_setting("wd=1e-4")
    assert str(refused.value) == "--setting names no learning rate; e.g. --setting lr=3e-4"
    assert grid.find_setting(SWEEP_WD, settings, "lr=0.001,wd=1e-4") is settings[1]
    assert grid.find_setting(SWEEP_WD, settings, "lr=0.0010000001,wd=0") is settings[0]  # the flag's rounding
    assert grid.find_setting(SWEEP_WD, settings, "lr=0.001,wd=0.00010000001") is settings[1]
    assert grid.find_setting(SWEEP_WD, settings, "lr=0.001,wd=1e-13") is settings[0]  # zero, as printed
    with pytest.raises(ConfigError) as refused:
        grid.find_setting(SWEEP_WD, settings, "lr=0.001")  # two match: both are named, and how to choose
    assert str(refused.value) == ("--setting lr=0.001 names 2 settings of this sweep (lr=0.001,wd=0, "
                                  "lr=0.001,wd=0.0001): add the weight decay, e.g. --setting lr=0.001,wd=0")
    with pytest.raises(ConfigError, match="not one of this sweep's settings"):
        grid.find_setting(SWEEP_WD, settings, "lr=0.002")
    grid.refuse_setting_of_no_sweep(SWEEP, "lr=1e-3")
    grid.refuse_setting_of_no_sweep(TrainConfig(), None)
    with pytest.raises(ConfigError) as refused:
        grid.refuse_setting_of_no_sweep(TrainConfig(), "lr=1e-3")
    assert str(refused.value) == "--setting chooses one setting of a sweep; this run is not a sweep: drop --setting"


def test_the_members_a_run_is_used_through():
    seeds = TrainConfig(seeds=3)
    assert grid.choose_members(seeds, [0.9, None, 0.8], [1]) == grid.Choice([0, 2], None, [1], 1)
    chosen = grid.choose_members(SWEEP, [0.90, 0.92, None, 0.99], [2])
    assert chosen.used == [0, 1] and chosen.setting.lr == 1e-3 and chosen.left_out == 0
    named = grid.choose_members(SWEEP, [0.90, 0.92, None, 0.99], [2], setting="lr=3e-3")
    assert named.used == [3] and named.setting.lr == 3e-3 and named.left_out == 1 and named.diverged == [2]
    wd_named = grid.choose_members(SWEEP_WD, [0.9, 0.9, 0.95, 0.95], [], setting="lr=1e-3,wd=0")
    assert wd_named.used == [0, 1]  # the weight decay named, not the best setting's
    with pytest.raises(ConfigError) as refused:
        grid.choose_members(SWEEP, [0.90, 0.92, None, None], [2, 3], setting="lr=3e-3")
    assert str(refused.value) == ("every model of the setting lr=0.003 diverged, so there is nothing to predict "
                                  "with; choose another with --setting")
    with pytest.raises(ConfigError) as refused:
        grid.choose_members(seeds, [None] * 3, [0, 1, 2])
    assert str(refused.value) == ("every member of this run diverged, so there is nothing to predict with; retrain "
                                  "it with a lower --lr")
    with pytest.raises(ConfigError, match="not a sweep"):
        grid.choose_members(seeds, [0.9] * 3, [], setting="lr=1e-3")
    with pytest.raises(ConfigError, match="lr=9e-3 is not one of this sweep's settings: lr=0.001, lr=0.003"):
        grid.choose_members(SWEEP, [0.9] * 4, [], setting="lr=9e-3")


# ---------------------------------------------------------------- record.py

def steps(loss, correct, grad_norm) -> dict[str, np.ndarray]:
    return {"loss": np.asarray(loss, np.float32), "correct": np.asarray(correct), "grad_norm": np.asarray(grad_norm)}


def test_one_models_row_counts_what_its_epoch_trained_and_scored():
    row = record.one_model_row(3, steps([1.0, 0.5], [6, 8], [2.0, 5.0]),
                               record.Scores(np.int32(45), np.float32(9.0), 50), learning_rate=1e-3, seconds=1.5,
                               batch_size=10)
    assert row == record.EpochMetrics(3, 0.75, 14 / 20, 0.9, 9.0 / 50, 1e-3, 1.5, 5.0)
    assert row.as_row() == {"epoch": 3, "loss": 0.75, "train_accuracy": 0.7, "test_accuracy": 0.9,
                            "test_loss": pytest.approx(0.18), "learning_rate": 1e-3, "seconds": 1.5,
                            "max_grad_norm": 5.0}
    assert row.line(9) == "Epoch  3 | Loss: 0.7500 | Train Acc: 0.7000 | Test Acc: 0.9000 | lr 1.00e-03 | 1.50s"
    assert row.line(100).startswith("Epoch    3 |")  # one wider than the last epoch's number


def members_epoch(diverged: set[int]) -> record.EpochMetrics:
    metrics = steps([[1.0, 0.5], [2.0, 1.0], [np.nan, np.nan]], [[6, 8], [4, 4], [0, 0]], [[2.0, 5.0], [1.0, 1.0], [9, 9]])
    return record.members_row(2, metrics, record.Scores(np.array([45, 40, 0, 48]), np.array([9.0, 10.0, np.nan, 8.0]),
                                                        50),
                              learning_rates=[1e-3, 3e-3, 3e-3], seconds=2.0, batch_size=10, diverged=diverged)


def test_a_members_row_holds_each_member_and_their_means_without_the_diverged():
    row = members_epoch({2})
    assert row.members["test_accuracy"][:2] == [0.9, 0.8] and math.isnan(row.members["test_accuracy"][2])
    assert row.members["train_accuracy"][:2] == [0.7, 0.4] and row.members["loss"][:2] == [0.75, 1.5]
    assert row.members["max_grad_norm"][:2] == [5.0, 1.0] and row.members["test_loss"][:2] == [0.18, 0.2]
    assert row.members["learning_rate"] == [1e-3, 3e-3, 3e-3]
    assert (row.loss, row.train_accuracy, row.test_accuracy) == pytest.approx((1.125, 0.55, 0.85))
    assert (row.test_loss, row.max_grad_norm, row.learning_rate) == pytest.approx((0.19, 3.0, 3e-3))
    assert row.ensemble_test_accuracy == 48 / 50  # the counts' last row
    assert row.as_row()["members"]["test_accuracy"][2] is None  # null in the JSON, not NaN
    line = row.line(9, used=[0, 1], label="best: lr=0.001")
    assert line == ("Epoch  2 | best: lr=0.001 | Loss: 1.1250 ± 0.5303 | Train Acc: 0.5500 ± 0.2121 | "
                    "Test Acc: 0.8500 ± 0.0707 | Ensemble: 0.9600 | lr 1.00e-03..3.00e-03 | 2.00s")
    # One member used: its numbers, no "± 0.0000" (one value has no spread to show).
    assert row.line(9, used=[1]) == ("Epoch  2 | Loss: 1.5000 | Train Acc: 0.4000 | Test Acc: 0.8000 | "
                                      "Ensemble: 0.9600 | lr 3.00e-03 | 2.00s")
    assert row.line(9) == row.line(9, used=[0, 1, 2])  # every member by default (mean_std leaves out the NaN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mean taken over nothing
        everyone_lost = members_epoch({0, 1, 2})
    assert math.isnan(everyone_lost.test_accuracy) and math.isnan(everyone_lost.loss)
    assert "| Loss: nan | Train Acc: nan |" in everyone_lost.line(9)  # no finite value: nothing to spread


def test_a_sweeps_row_is_its_used_members_at_their_rate_with_no_ensemble():
    row = record.headline_over(members_epoch({2}), [0])
    assert (row.loss, row.test_accuracy, row.train_accuracy, row.test_loss, row.max_grad_norm) == pytest.approx(
        (0.75, 0.9, 0.7, 0.18, 5.0))
    assert row.learning_rate == 1e-3 and row.ensemble_test_accuracy is None  # its member's rate, not the highest
    assert row.line(9, used=[0]) == ("Epoch  2 | Loss: 0.7500 | Train Acc: 0.7000 | Test Acc: 0.9000 | "
                                     "lr 1.00e-03 | 2.00s")  # no ensemble, and one seed: no spread
    np.testing.assert_equal(row.members, members_epoch({2}).members)  # each member's numbers as they were


def test_divergence_is_the_first_nan_infinite_or_exploded_loss():
    assert record.first_divergence(np.array([1.0, 2.0, 1e6])) is None  # the bound itself is finite
    assert record.first_divergence(np.array([1.0, 1e6 * 1.001, np.nan])) == 1
    assert record.first_divergence(np.array([1.0, -np.inf])) == 1
    assert record.first_divergence(np.array([np.nan, 1.0])) == 0
    assert record.divergence_text(np.array([1.0, np.nan]), 1, 3, 11) == "loss became nan at epoch 3, step 2 of 11"
    assert record.divergence_text(np.array([1.1e15]), 0, 1, 5) == (
        "loss reached 1.1e+15 (finite, but exploded) at epoch 1, step 1 of 5")


def test_one_model_stops_at_its_first_bad_loss_or_test_loss():
    record.check_finite({"loss": np.array([1.0, 0.5])}, 0.3, 1, 2)
    with pytest.raises(TrainingDivergedError) as diverged:
        record.check_finite({"loss": np.array([1.0, np.inf])}, 0.3, 4, 2)
    assert str(diverged.value) == ("loss became inf at epoch 4, step 2 of 2; lower --lr, add --clip-norm 1.0, or use "
                                   "--optimizer adam")
    with pytest.raises(TrainingDivergedError) as diverged:
        record.check_finite({"loss": np.array([1.0, 0.5])}, math.nan, 4, 2)
    assert str(diverged.value) == ("the test loss became nan after epoch 4: the weights overflow on unseen images; "
                                   "lower --lr, add --clip-norm 1.0, or use --optimizer adam")


def test_members_that_diverge_are_warned_about_once_and_all_of_them_is_an_error():
    diverged: set[int] = set()
    losses = {"loss": np.array([[1.0, 0.5], [1.0, np.nan], [1.0, 0.4]])}
    with pytest.warns(RuntimeWarning) as caught:
        record.check_members_finite(losses, np.array([0.1, 0.2, 0.3]), 2, 2, diverged)
    assert diverged == {1} and [str(w.message) for w in caught] == [
        "member 1 diverged: loss became nan at epoch 2, step 2 of 2; it is reported as NaN and left out of the "
        "means and the ensemble"]
    with pytest.warns(RuntimeWarning, match="member 2 diverged: the test loss became inf after epoch 3") as caught:
        record.check_members_finite(losses, np.array([0.1, 0.2, np.inf]), 3, 2, diverged)
    assert diverged == {1, 2} and len(caught) == 1  # member 1 is not warned about again
    every = {"loss": np.array([[np.nan, 1.0], [1.0, np.nan], [1.0, 2e6]])}
    with pytest.raises(TrainingDivergedError, match="loss reached 2e\\+06 .* at epoch 4, step 2 of 2"):
        record.check_members_finite(every, np.array([0.1, 0.2, 0.3]), 4, 2, {0, 1})  # named by the one new now
    with pytest.raises(TrainingDivergedError, match="loss became nan at epoch 5, step 1 of 2"):
        record.check_members_finite(every, np.array([0.1, 0.2, 0.3]), 5, 2, {0, 1, 2})  # none new: the first
    finite = {"loss": np.array([[1.0, 0.5], [1.0, 0.4]])}
    with pytest.raises(TrainingDivergedError, match="the test loss became inf after epoch 6"):
        record.check_members_finite(finite, np.array([np.inf, np.inf]), 6, 2, set())  # the test loss alone


def test_the_done_line_names_the_whole_best_setting():
    """Two settings of a weight-decay grid share a learning rate: the Done line names the weight decay too."""
    from jaxintro.report import accuracy_text

    best = {"lr": 1e-3, "weight_decay": 1e-4, "test_accuracy": 0.97, "test_accuracy_std": 0.001, "diverged": 0}
    summary = {"best": best, "ensemble_test_accuracy": 0.975}
    assert accuracy_text(SWEEP_WD, summary) == ("97.00 ± 0.10% at the best setting (lr 0.001, wd 0.0001; its 2 "
                                                "seeds' ensemble 97.50%)")
    assert accuracy_text(SWEEP, summary) == "97.00 ± 0.10% at the best setting (lr 0.001; its 2 seeds' ensemble 97.50%)"
    # One seed a setting: no spread to show, so none is printed (a "± 0.00" would claim a measured spread).
    assert accuracy_text(dataclasses.replace(SWEEP, seeds=1), summary) == "97.00% at the best setting (lr 0.001)"


def test_a_sweep_of_one_seed_prints_no_spread(capsys):
    from jaxintro.report import report_for

    settings = [{"lr": lr, "weight_decay": 0.0, "test_accuracy": acc, "test_accuracy_std": 0.0, "diverged": 0}
                for lr, acc in ((1e-3, 0.97), (3e-3, 0.96))]
    summary = {"settings": settings, "best": settings[0], "sweep_png": "sweep.png", "members": []}
    report_for(dataclasses.replace(SWEEP, seeds=1)).print_table(summary)
    out = capsys.readouterr().out
    assert "±" not in out and "97.00%" in out and "test acc (one seed)" in out


def test_a_sweep_chooses_on_held_out_images_and_reports_its_choice_by_the_test_set():
    """The test set chooses nothing: with held-out images the best setting is theirs, and what the run reports of it is
    its test accuracy; the setting the test set would have chosen is another here (the lesson's point)."""
    config = TrainConfig(lr_grid=(1e-3, 3e-3), seeds=2, validation=100)
    row = {"members": {"test_accuracy": [0.90, 0.92, 0.95, 0.97], "val_accuracy": [0.96, 0.94, 0.91, 0.93]}}
    assert grid.judged_by(row["members"]) == "val_accuracy"
    best = grid.chosen_setting(config, row)
    assert (best.lr, best.mean) == (1e-3, pytest.approx(0.91))
    assert grid.headline_accuracy(config, row) == pytest.approx(0.91)
    assert grid.best_setting(grid.settings_of(config, row, "test_accuracy")).lr == 3e-3
    # A run without held-out images (before `--validation`, or `train` as the lesson runs it) chooses as it did.
    del row["members"]["val_accuracy"]
    assert grid.judged_by(row["members"]) == "test_accuracy" and grid.chosen_setting(config, row).lr == 3e-3


def test_a_sweep_holds_out_a_twelfth_of_the_training_set_unless_told():
    assert TrainConfig(lr_grid=(1e-3, 3e-3), validation=None).validation_images(60_000) == 5_000
    assert TrainConfig(lr_grid=(1e-3, 3e-3), validation=300).validation_images(60_000) == 300
    assert TrainConfig().validation_images(60_000) == 0  # `train`: all 60,000, as the lesson


def test_a_diverged_members_held_out_scores_are_nan_and_left_out_of_the_mean():
    """A member that diverged is NaN on the held-out images too: its setting counts as diverged when chosen there,
    not rewarded with the survivors' mean."""
    metrics = {"loss": np.ones((2, 3)), "correct": np.full((2, 3), 4), "grad_norm": np.ones((2, 3))}
    held_out = record.Scores(np.array([90, 80, 170]), np.array([10.0, 20.0, 30.0]), 100)
    row = record.members_row(1, metrics, record.Scores(np.array([5, 6, 11]), np.array([1.0, 2.0, 3.0]), 10),
                             learning_rates=[1e-3, 1e-3], seconds=1.0, batch_size=8, diverged={1}, validation=held_out)
    assert row.members["val_accuracy"][0] == 0.9 and math.isnan(row.members["val_accuracy"][1])
    assert row.members["val_loss"][0] == 0.1 and math.isnan(row.members["val_loss"][1])
    assert row.val_accuracy == 0.9 and row.val_loss == 0.1
    assert row.as_row()["members"]["val_accuracy"] == [0.9, None]  # null in metrics.jsonl, as a diverged test score


def test_a_diverged_member_is_read_from_its_loss_null_in_the_file_nan_in_memory():
    assert diverged_in({"members": {"loss": [0.5, float("nan"), None, float("inf")]}}) == [1, 2, 3]
    assert diverged_in({"loss": 0.5}) == []  # a single run's row
