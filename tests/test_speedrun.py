"""`jaxintro speedrun`: the report's fields and arithmetic, the t-test, and one recipe giving one model however it
is compiled (on scikit-learn's digits: small and offline; the speed itself is measured, never asserted)."""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxintro import speedrun
from jaxintro.cli import main
from jaxintro.commands import speedrun as speedrun_command
from jaxintro.data import load_dataset
from jaxintro.i18n import format_number
from jaxintro.speedrun import Recipe

SMALL = Recipe(epochs=3, batch_size=64, peak_lr=3e-3, warmup_steps=10, label_smoothing=0.1, average=0.9,
               standardize=True)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.mark.backend
def test_the_one_sided_test_is_students_t():
    # By hand: mean 0.9815, std (n - 1) 0.0012910, t = 0.0015 / (0.0012910 / 2) = 2.3238.
    t, p = speedrun.one_sided_test(np.array([0.981, 0.982, 0.983, 0.980]), 0.98)
    assert t == pytest.approx(2.3238, abs=1e-4)
    assert 0.05 < p < 0.055  # Student's t, 3 degrees of freedom: t(0.05) = 2.353 > 2.3238 > t(0.055)
    # The table's one-sided 1% point for 7 degrees of freedom is 2.998: eight seeds exactly there give p = 0.01.
    spread = np.array([-1, 1, -1, 1, -1, 1, -1, 1], dtype=float)
    accuracies = 0.98 + 2.998 * np.std(spread, ddof=1) / math.sqrt(8) + spread
    assert speedrun.one_sided_test(accuracies, 0.98)[1] == pytest.approx(0.01, abs=2e-4)
    assert speedrun.one_sided_test(np.array([0.97, 0.975, 0.972]), 0.98)[1] > 0.95  # below the target: no record
    assert speedrun.one_sided_test(np.array([0.99]), 0.98)[1] == 1.0  # one seed is no evidence
    assert speedrun.one_sided_test(np.full(3, 0.99, np.float32), 0.98) == (math.inf, 0.0)  # no spread, float32 too
    assert speedrun.one_sided_test(np.full(5, 0.98, np.float32), np.float32(0.98))[1] == 1.0  # at the target: not above


@pytest.mark.backend
def test_seeds_exactly_at_the_target_are_not_above_it(digits):
    """The evidence counts correct images as integers: 9,800 of 10,000 is 0.98, not the float32 0.98000002 that
    a fraction computed on the device reads as (above 0.98, p = 0, a record claimed at the target itself)."""
    fraction32 = np.float32(9_800) / np.float32(10_000)  # what the device computed before
    assert speedrun.one_sided_test(np.full(8, fraction32), 0.98) == (math.inf, 0.0)  # read as above 0.98
    exactly = speedrun.accuracy(np.full(8, 9_800), digits._replace(y_test=np.zeros(10_000, np.int32)))
    assert exactly.dtype == np.float64 and speedrun.one_sided_test(exactly, 0.98) == (-math.inf, 1.0)
    counts = jax.jit(speedrun.make_program(SMALL, digits)["evaluate"])
    program = speedrun.make_program(SMALL, digits)
    correct = counts(program["init"](jax.random.key(0))[0], digits.x_test, digits.y_test)
    assert jnp.issubdtype(correct.dtype, jnp.integer)  # a count, whatever the test set's size


@pytest.mark.backend
def test_the_verdict_is_at_the_end_of_the_fixed_recipe_not_at_the_first_epoch_that_passes():
    from jaxintro.commands.speedrun import summary

    # Epoch 3 passes; epoch 4, the recipe's last, does not: choosing epoch 3 would be a choice made on the test set.
    curves = np.array([[0.90, 0.981, 0.9855, 0.981], [0.91, 0.979, 0.986, 0.979], [0.92, 0.983, 0.9845, 0.983]])
    assert speedrun.one_sided_test(curves[:, 2], 0.98)[1] < 0.01
    verdict = summary(curves, 0.98, 0.01)
    assert (verdict["reached"], verdict["target_epoch"]) == (False, None)
    assert verdict["mean_test_accuracy"] == pytest.approx(curves[:, -1].mean())
    assert (verdict["t_statistic"], verdict["p_value"]) == pytest.approx(speedrun.one_sided_test(curves[:, -1], 0.98))
    passed = summary(curves[:, :3], 0.98, 0.01)  # a 3-epoch recipe ends where the seeds pass
    assert (passed["reached"], passed["target_epoch"]) == (True, 3)
    assert speedrun.first_epoch_at([0.5, 0.98, 0.99], 0.98) == 2 and speedrun.first_epoch_at([0.5], 0.98) is None
    assert speedrun.seconds_to(10.0, 4, 3) == 7.5 and speedrun.seconds_to(10.0, 4, None) is None


@pytest.mark.backend
def test_one_recipe_trains_one_model_however_it_is_compiled(digits):
    """The whole run as one program, one program per epoch and the lesson's loop on host data are the same training:
    the same curve (the ablation of the programs changes time only). Seed 0 of the vmapped evidence is this model
    too: the report's test checks it."""
    curves = {program: speedrun.timed_run(dataclasses.replace(SMALL, program=program), digits)
              for program in speedrun.PROGRAMS}
    for program, timed in curves.items():
        assert timed["curve"] == pytest.approx(curves["run"]["curve"], abs=2 / len(digits.y_test)), program
        assert timed["train_seconds"] > 0 and timed["compile_seconds"] > 0
    assert curves["run"]["curve"][-1] > 0.8  # it learns


@pytest.mark.parametrize("program", speedrun.PROGRAMS)
def test_a_rows_later_rounds_time_the_executable_its_first_compiled(program, digits, monkeypatch):
    """Rounds of one recipe share what the first compiled: one compile a row (on a TPU each was ~10 s), the same
    curve every round, and a later round reports no compile of its own."""
    recipe = dataclasses.replace(SMALL, program=program, epochs=1)
    compiles = []
    real_jit = jax.jit
    monkeypatch.setattr(jax, "jit", lambda fn, **kw: compiles.append(fn) or real_jit(fn, **kw))
    compiled: dict = {}
    first = speedrun.timed_run(recipe, digits, 0, compiled)
    made = len(compiles)
    again = speedrun.timed_run(recipe, digits, 0, compiled)
    assert made > 0 and len(compiles) == made  # nothing jitted anew in the second round
    assert first["compile_seconds"] > 0 and again["compile_seconds"] is None
    assert again["curve"] == first["curve"] and again["train_seconds"] > 0


@pytest.mark.backend
def test_the_initial_weights_and_the_shuffles_draw_from_different_keys(digits):
    """`init` splits its key first, as `jaxintro train` does: the weights' key is not the one the epochs split."""
    program = speedrun.make_program(SMALL, digits)
    (params, _opt, _kept), carried = program["init"](jax.random.key(3))
    init_key, key = jax.random.split(jax.random.key(3))
    assert jnp.array_equal(jax.random.key_data(carried), jax.random.key_data(key))
    want = speedrun.init_params(init_key, speedrun.model_sizes(digits))
    assert jax.tree.all(jax.tree.map(jnp.array_equal, params, want))


def test_every_trick_changes_the_step_it_is_part_of(digits):
    """Each trick changes one step of training (run eagerly: no program compiled): the loss it takes, the rate it
    steps at, or the weights it keeps."""
    plain = dataclasses.replace(SMALL, label_smoothing=0.0, average=0.0, standardize=False, schedule="constant")
    batch = (digits.x_train[:64], digits.y_train[:64])

    def one_step(recipe: Recipe) -> tuple:
        program = speedrun.make_program(recipe, digits)
        state, _key = program["init"](jax.random.key(0))
        return program["step"](state, batch)

    (params, _opt, kept), loss = one_step(plain)
    assert jax.tree.all(jax.tree.map(jnp.array_equal, kept, params))  # no average: the last weights are kept
    for change, differs in (({"label_smoothing": 0.1}, "loss"), ({"standardize": True}, "loss"),
                            ({"schedule": "warmup-cosine"}, "params"), ({"average": 0.9}, "kept")):
        (params2, _opt2, kept2), loss2 = one_step(dataclasses.replace(plain, **change))
        changed = {"loss": loss2 != loss, "params": not jax.tree.all(jax.tree.map(jnp.array_equal, params2, params)),
                   "kept": not jax.tree.all(jax.tree.map(jnp.array_equal, kept2, params2))}
        assert changed[differs], change
    assert speedrun.input_scale(SMALL, digits.x_train) == pytest.approx(
        (digits.x_train.mean() / 255, (digits.x_train / 255).std()))  # the training images' own, not the test's


def test_the_report_holds_every_field_and_its_arithmetic(capsys, tmp_path):
    assert main(["speedrun", "--dataset", "digits", "--seeds", "3", "--rounds", "1", "--epochs", "4",
                 "--lesson-epochs", "1", "--batch-size", "64", "--lr", "5e-3", "--target", "0.85", "--first-seed", "7",
                 "--out", str(tmp_path), "--json"]) == 0  # the evidence's first seed is the timed model: the same recipe
    # and program; the recipe pinned here (not the record's, tuned for MNIST), so that digits reach the target
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert report == json.loads((tmp_path / "speedrun.json").read_text())
    for field in ("target", "reached", "mean_test_accuracy", "std", "seeds", "p_value", "epochs", "train_seconds",
                  "seconds_with_compile", "lesson_recipe_train_seconds", "torch_train_seconds"):
        assert field in report, field
    seeds = np.array(report["seed_test_accuracy"])
    assert report["seeds"] == len(seeds) == 3 and report["reached"] and report["first_seed"] == 7, out
    assert "Seeds 7-9: " in out and "after the recipe's 4 epochs" in out
    assert report["mean_test_accuracy"] == pytest.approx(seeds.mean())
    assert report["std"] == pytest.approx(seeds.std(ddof=1))
    assert (report["t_statistic"], report["p_value"]) == pytest.approx(speedrun.one_sided_test(seeds, 0.85))
    assert report["p_value"] < 0.01
    record = report["rows"]["speedrun"]
    assert report["target_epoch"] == 4  # the fixed recipe's last epoch: the evidence is where it ends
    # The record's recipe, JAX's row and PyTorch's, reaches the target where its evidence does: at its end.
    assert report["rows"]["speedrun"]["reached_epoch"] == report["rows"]["torch-eager"]["reached_epoch"] == 4
    assert seeds[0] == pytest.approx(record["curve"][-1], abs=2 / 360)  # 360 test digits
    assert report["train_seconds"] == pytest.approx(record["train_seconds_all_epochs"] * report["target_epoch"] / 4)
    assert report["seconds_with_compile"] == pytest.approx(report["load_seconds"] + record["setup_seconds"]
                                                           + record["compile_seconds"] + report["train_seconds"])
    assert report["lesson_recipe_train_seconds"] == report["rows"]["lesson-recipe"]["train_seconds_all_epochs"]
    assert report["ratio_to_lesson_recipe"] == pytest.approx(report["train_seconds"] / report["lesson_recipe_train_seconds"])
    for name in ("speedrun", "torch-eager", "lesson-recipe", "lesson-script"):
        row = report["rows"][name]
        assert row["train_seconds_range"] == [row["train_seconds_all_epochs"]] * 2, name  # one round: its own
        expected = None if row["reached_epoch"] is None else row["train_seconds_all_epochs"] * row["reached_epoch"] / row["epochs"]
        assert row["train_seconds"] == (pytest.approx(expected) if expected else None), name
    assert report["torch_train_seconds"] == report["rows"]["torch-eager"]["train_seconds"]
    assert "One model to 85.0%" in out and "x the training time of the lesson's recipe" in out


def test_without_pytorch_the_row_is_skipped_once_before_the_rounds_naming_make_bench(capsys, tmp_path, monkeypatch):
    import importlib.util

    from jaxintro.commands import speedrun as command

    real = importlib.util.find_spec
    monkeypatch.setattr(command.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["speedrun", "--dataset", "digits", "--seeds", "2", "--rounds", "2", "--epochs", "1",
                 "--lesson-epochs", "1", "--batch-size", "64", "--target", "0.5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    said = "torch-eager: skipped, torch is not installed (`make bench` installs it into .venv)"
    assert out.count(said) == 1 and out.index(said) < out.index("round 1 of 2")
    assert "timing torch-eager" not in out and "pip install" not in out


def test_each_rows_rounds_share_its_compiled_programs_and_the_record_reports_the_first_rounds_compile(
        capsys, tmp_path, monkeypatch):
    calls, timed_run = [], speedrun.timed_run

    def recorded(recipe, data, seed, compiled):
        result = timed_run(recipe, data, seed, compiled)
        calls.append((recipe.epochs, id(compiled), result["compile_seconds"]))
        return result

    monkeypatch.setattr(speedrun, "timed_run", recorded)
    assert main(["speedrun", "--dataset", "digits", "--seeds", "2", "--rounds", "2", "--epochs", "1",
                 "--lesson-epochs", "2", "--batch-size", "64", "--target", "0.5", "--out", str(tmp_path)]) == 0
    record_rounds = [c for c in calls if c[0] == 1]  # the record's recipe: 1 epoch; the lesson's: 2
    lesson_rounds = [c for c in calls if c[0] == 2]
    assert len(record_rounds) == len(lesson_rounds) == 2
    for first, second in (record_rounds, lesson_rounds):
        assert first[1] == second[1] and first[2] > 0 and second[2] is None  # one dict, one compile, a row
    assert record_rounds[0][1] != lesson_rounds[0][1]
    report = json.loads((tmp_path / "speedrun.json").read_text())
    assert report["compile_seconds"] == record_rounds[0][2]


def test_tunings_timed_rounds_of_a_cost_share_its_compiled_program(monkeypatch, capsys):
    """`tune` times each (epochs, batch) class `rounds` times: every round of a class gets that class's programs."""
    seen = []
    monkeypatch.setattr(speedrun, "timed_run", lambda recipe, data, seed, compiled: seen.append(
        ((recipe.epochs, recipe.batch_size), compiled)) or {"train_seconds": 1.0})  # the dicts kept: ids could repeat
    tried = [{"reached": True, "recipe": dataclasses.asdict(SMALL)},
             {"reached": True, "recipe": dataclasses.asdict(dataclasses.replace(SMALL, epochs=5))},
             {"reached": False, "recipe": dataclasses.asdict(dataclasses.replace(SMALL, epochs=7))}]
    assert speedrun_command.cost_seconds(tried, None, 3) == {(3, 64): 1.0, (5, 64): 1.0}
    by_class: dict = {}
    for key, compiled in seen:
        by_class.setdefault(key, []).append(compiled)
    assert sorted(by_class) == [(3, 64), (5, 64)] and len(seen) == 6
    for rounds in by_class.values():
        assert len(rounds) == 3 and all(compiled is rounds[0] for compiled in rounds)
    assert by_class[(3, 64)][0] is not by_class[(5, 64)][0]


def test_evidence_seeds_past_the_largest_seed_are_refused(capsys, tmp_path):
    """jax.random.key keeps a seed's low 32 bits: --first-seed 2**32 would train the tuning seeds 0, 1, ... again."""
    assert main(["speedrun", "--dataset", "digits", "--first-seed", str(2**32 - 4), "--seeds", "8", "--out",
                 str(tmp_path)]) == 2
    assert "goes past the largest seed, 4294967295" in capsys.readouterr().err


def test_a_recipe_that_cannot_be_is_refused(capsys, tmp_path):
    assert main(["speedrun", "--dataset", "digits", "--seeds", "1", "--out", str(tmp_path)]) == 2
    assert "--seeds must be 2 or more" in capsys.readouterr().err
    assert main(["speedrun", "--dataset", "digits", "--average", "1.5", "--out", str(tmp_path)]) == 2
    assert "--average and --label-smoothing in [0, 1)" in capsys.readouterr().err
    assert main(["speedrun", "--dataset", "digits", "--batch-size", "5000", "--out", str(tmp_path)]) == 2
    assert "--batch-size 5000 is larger than the 1437 training images" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, said", [
    ("--target", "98", "expected a fraction between 0 and 1 (0.98 is 98%), got 98"),  # a percent: 98 of 1
    ("--target", "0", "expected a fraction between 0 and 1"), ("--target", "1", "expected a fraction between 0 and 1"),
    ("--alpha", "1.5", "expected a level above 0 and at most 0.5 (0.01 is the usual one), got 1.5"),
    ("--alpha", "0.95", "expected a level above 0 and at most 0.5"),  # a mean below the target would pass
    ("--alpha", "0", "expected a level above 0 and at most 0.5"),
])
def test_a_target_or_level_that_cannot_be_is_refused_naming_its_unit(flag, value, said, capsys, tmp_path):
    with pytest.raises(SystemExit) as refused:
        main(["speedrun", "--dataset", "digits", flag, value, "--out", str(tmp_path)])
    assert refused.value.code == 2 and f"argument {flag}: {said}" in capsys.readouterr().err


def tried(epochs: int, mean: float, reached: bool, batch: int = 128) -> dict:
    return {"recipe": {"epochs": epochs, "batch_size": batch}, "mean_val_accuracy": mean, "reached": reached}


def test_the_tuning_chooses_the_fastest_that_passes_then_the_highest_mean():
    choose = speedrun_command.chosen_on_held_out
    grid = [tried(3, 0.990, True), tried(2, 0.981, True), tried(2, 0.984, True), tried(1, 0.985, False),
            tried(2, 0.982, True, batch=256), tried(2, 0.986, False, batch=256)]  # the last: fast, but not passed
    seconds = {(3, 128): 3.0, (2, 128): 2.0, (2, 256): 2.5}
    assert choose(grid, "time", seconds) is grid[2]  # the fastest class that passes; of it the higher mean
    assert choose(grid, "time", {**seconds, (2, 256): 1.5}) is grid[4]  # a bigger batch, faster: it wins
    assert choose(grid, "accuracy", {}) is grid[0]  # the accuracy track: the highest mean, whatever it costs
    none = [tried(1, 0.97, False), tried(2, 0.975, False)]
    assert choose(none, "time", {}) is none[1]  # none passed: the highest mean
    ties = [tried(2, 0.982, True), tried(2, 0.982, True)]
    assert choose(ties, "time", {(2, 128): 2.0}) is ties[0]  # a tie: the recipe listed first


def test_tune_judges_every_recipe_on_held_out_training_images_never_the_test_set(digits, capsys, tmp_path,
                                                                                 monkeypatch):
    grid = (dataclasses.replace(SMALL, epochs=1), dataclasses.replace(SMALL, epochs=2, peak_lr=5e-3),
            dataclasses.replace(SMALL, epochs=1, batch_size=32, peak_lr=1e-9))  # learns nothing: not timed
    monkeypatch.setitem(speedrun_command.TUNING, "time", grid)
    seen, evidence = [], speedrun.evidence
    monkeypatch.setattr(speedrun, "evidence", lambda recipe, data, seeds, first: seen.append(
        (recipe, data, seeds, first)) or evidence(recipe, data, seeds, first))
    timed, timed_run = [], speedrun.timed_run
    monkeypatch.setattr(speedrun, "timed_run", lambda recipe, data, seed, compiled: timed.append(data) or timed_run(
        recipe, data, seed, compiled))
    assert main(["speedrun", "--tune", "--dataset", "digits", "--validation", "300", "--target", "0.5",
                 "--rounds", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    kept = len(digits.x_train) - 300
    for recipe, data, seeds, first in seen:
        assert (seeds, first) == (8, 0)  # the tuning seeds, not the evidence's
        assert np.array_equal(data.x_train, digits.x_train[:kept]) and np.array_equal(data.y_train, digits.y_train[:kept])
        assert np.array_equal(data.x_test, digits.x_train[kept:]) and np.array_equal(data.y_test, digits.y_train[kept:])
    assert [recipe for recipe, *_ in seen] == list(grid)
    assert timed and all(data is seen[0][1] for data in timed)  # timed on the same held-out split, never the test
    report = json.loads((tmp_path / "tuning.json").read_text())
    assert report["validation_images"] == 300 and [t["recipe"] for t in report["tried"]] == [
        dataclasses.asdict(r) for r in grid]
    seconds = {(c["epochs"], c["batch_size"]): c["train_seconds"] for c in report["timed"]}
    assert [t["reached"] for t in report["tried"]] == [True, True, False]
    assert set(seconds) == {(t["recipe"]["epochs"], t["recipe"]["batch_size"]) for t in report["tried"] if t["reached"]}
    assert report["chosen"] == speedrun_command.chosen_on_held_out(report["tried"], "time", seconds)["recipe"]
    assert not report["is_the_tracks_recipe"] and "not the track's recipe" in out
    assert f"trained on {kept:,} images and judged on the last 300 training images" in out


@pytest.mark.parametrize("flags, named", [(["--lr", "1e-3"], "--lr"), (["--warmup-steps", "9"], "--warmup-steps"),
                                          (["--no-standardize"], "--[no-]standardize"), (["--ablate"], "--ablate"),
                                          (["--seeds", "4"], "--seeds"), (["--first-seed", "0"], "--first-seed")])
def test_tune_refuses_a_recipe_flag_naming_it(flags, named, capsys, tmp_path):
    assert main(["speedrun", "--tune", "--dataset", "digits", *flags, "--out", str(tmp_path)]) == 2
    assert f"--tune tries every recipe of the track's grid; {named} has no place in it" in capsys.readouterr().err


def test_validation_without_tune_is_refused(capsys, tmp_path):
    assert main(["speedrun", "--dataset", "digits", "--validation", "100", "--out", str(tmp_path)]) == 2
    assert "--validation holds images out for --tune" in capsys.readouterr().err


def test_a_tuning_where_no_recipe_passes_says_so(capsys, tmp_path, monkeypatch):
    grid = (dataclasses.replace(SMALL, epochs=1, peak_lr=1e-9), dataclasses.replace(SMALL, epochs=1))
    monkeypatch.setitem(speedrun_command.TUNING, "time", grid)
    assert main(["speedrun", "--tune", "--dataset", "digits", "--validation", "300", "--target", "0.9999",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "tuning.json").read_text())
    assert not any(t["reached"] for t in report["tried"]) and report["timed"] == []  # nothing to time
    assert report["chosen"] == dataclasses.asdict(grid[1])  # the highest mean: the one that learns
    assert "No recipe reached the target on the held-out images: the one with the highest mean is shown" in out


@pytest.mark.parametrize("lang, lines", [
    ("en", ["speedrun            2           2        9.2ms        12.3ms [9.0ms-13.1ms]          98.18%",
            "torch-eager         2           2         1.96          1.96 [1.67-2.11]          97.95%",
            "lesson-recipe      10           -            -          0.99 [0.99-1.03]          97.76%",
            "One model to 98.0%: 9.2ms of training (1.71s with loading the data and compiling)"]),
    ("es", ["speedrun            2           2        9,2ms        12,3ms [9,0ms-13,1ms]          98,18%",
            "torch-eager         2           2         1,96          1,96 [1,67-2,11]          97,95%",
            "lesson-recipe      10           -            -          0,99 [0,99-1,03]          97,76%",
            "Un modelo hasta el 98,0%: 9,2ms de entrenamiento (1,71s con la carga"]),
])
def test_the_records_table_writes_a_chips_milliseconds_and_the_languages_numbers(lang, lines, capsys):
    """Under a second a time is printed in ms (an accelerator's run is milliseconds: "0.01" said nothing), and every
    number as the language writes it."""
    from jaxintro import i18n
    from jaxintro.commands.speedrun import print_rows

    rows = {"speedrun": {"epochs": 2, "reached_epoch": 2, "train_seconds": 0.0092, "train_seconds_all_epochs": 0.0123,
                         "train_seconds_range": [0.0090, 0.0131], "curve": [0.97, 0.9818]},
            "torch-eager": {"epochs": 2, "reached_epoch": 2, "train_seconds": 1.96, "train_seconds_all_epochs": 1.96,
                            "train_seconds_range": [1.67, 2.11], "curve": [0.96, 0.9795]},
            "lesson-recipe": {"epochs": 10, "reached_epoch": None, "train_seconds": None,
                              "train_seconds_all_epochs": 0.994, "train_seconds_range": [0.9879, 1.03],
                              "curve": [0.9, 0.9776]}}
    report = {"train_seconds": 0.0092, "seconds_with_compile": 1.71, "target": 0.98, "target_epoch": 2}
    i18n.set_language(lang)  # put back to English after every test (conftest's isolated_cache)
    print_rows(report, rows)
    out = capsys.readouterr().out
    assert all(line in out for line in lines), out
    # The ablation's rows too: one unit a row, chosen by its longer time (to the target 0.9 s, all epochs 1.2 s).
    assert speedrun_command.seconds_cell(0.9, 1.2) == format_number(0.9, ".2f")
