"""Many models in one program: members are the single runs, a sweep compiles once, the ensemble averages."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import once_per_run, synthetic_dataset
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError
from jaxintro.grid import member_grid
from jaxintro.members import ensemble_model, members_and_ensemble
from jaxintro.memory import check_memory, estimate_memory_bytes
from jaxintro.models import build_model
from jaxintro.scoring import count_correct
from jaxintro.train import Trainer, fit

SMALL = dict(dataset="digits", batch_size=64, hidden=(32, 16), epochs=1)
# A vmapped member's epoch is the single run's, batched: XLA may sum the 64-long dot products in
# another order. float32 reassociation over one epoch of 32 steps moves parameters by a few ulps of
# their ~1e-1 size (measured: 6e-8 to 1.2e-7), far below any real difference between runs (seeds
# differ by ~1e-1). Unvmapped members (groups of 1, a CPU's default) run the single run's own program:
# equal bit for bit.
ATOL = 1e-5


def quiet(line: str) -> None:
    pass


@pytest.fixture(scope="module")
def data():
    return synthetic_dataset(2048, 256)


def assert_trees_close(a, b, atol: float = ATOL) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def member(tree, k: int):
    return jax.tree.map(lambda leaf: leaf[k], tree)


# Without dropout, one member at a time: test_members.py::test_member_k_of_a_seeds_run_is_the_run_with_seed_k_bit_for_bit.
@pytest.mark.parametrize("dropout, seeds, group, atol", [(0.2, 2, 0, 0.0), (0.0, 3, 2, ATOL), (0.2, 2, 2, ATOL)],
                         ids=["cpu-default-dropout", "vmapped-groups-of-2", "vmapped-dropout"])
def test_member_k_is_the_run_with_seed_k(data, dropout, seeds, group, atol):
    # vmapped-groups-of-2: members 0 and 1 vmapped together, then member 2 alone (lax.map's remainder).
    result = fit(TrainConfig(**SMALL, seed=5, seeds=seeds, dropout=dropout, member_group=group), data, log=quiet)
    for k in range(seeds):
        single = fit(TrainConfig(**SMALL, seed=5 + k, dropout=dropout), data, log=quiet)
        assert_trees_close(member(result.state.params, k), single.state.params, atol)
        assert_trees_close(member(result.state.opt_state, k), single.state.opt_state, atol)
        assert result.history[-1].members["loss"][k] == pytest.approx(single.history[-1].loss, rel=atol, abs=0)
    # Different seeds really are different models (so the check above could fail).
    first, second = member(result.state.params, 0), member(result.state.params, 1)
    assert max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(first), jax.tree.leaves(second))) > 0.05


# Runs in a fresh interpreter: the CPU device count must be set before JAX starts.
SPREAD_CHECK = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from conftest import synthetic_dataset
    from jaxintro.config import TrainConfig
    from jaxintro.train import Trainer, fit
    data = synthetic_dataset(2048, 256)
    small = dict(dataset="digits", batch_size=64, hidden=(32, 16), epochs=1)
    # Of four members, 0 and 1 train on device 0 and 2 and 3 on device 1: members 1 and 2 stand for both
    # devices, and for both places in a vmapped group of 2.
    cases = {"seeds-dropout": (dict(seeds=4, dropout=0.2), {k: dict(seed=5 + k, dropout=0.2) for k in (1, 2)}),
             "vmapped-groups-of-2": (dict(seeds=4, member_group=2), {k: dict(seed=5 + k) for k in (1, 2)}),
             "sweep": (dict(seeds=1, lr_grid=(1e-3, 3e-3)), {0: dict(seed=5, lr=1e-3), 1: dict(seed=5, lr=3e-3)})}
    out = {}
    for name, (members, singles) in cases.items():
        result = fit(TrainConfig(**small, seed=5, **members), data, log=lambda line: None)
        leaf = result.state.params["layer1"]["w"]
        diffs = []
        for k, single in singles.items():
            one = fit(TrainConfig(**small, **single), data, log=lambda line: None)
            # A sweep's optimizer state holds its hyper-parameters too: there the parameters are compared.
            both = "lr_grid" not in members
            pairs = zip(jax.tree.leaves((result.state.params, result.state.opt_state) if both else result.state.params),
                        jax.tree.leaves((one.state.params, one.state.opt_state) if both else one.state.params))
            diffs.append(max(float(np.max(np.abs(np.asarray(a)[k] - np.asarray(b)))) for a, b in pairs))
            diffs.append(abs(result.history[-1].members["loss"][k] - one.history[-1].loss))
            diffs.append(abs(result.history[-1].members["test_accuracy"][k] - one.history[-1].test_accuracy))
        out[name] = {"devices": len(leaf.sharding.device_set), "spec": str(leaf.sharding.spec), "max_diff": max(diffs)}
    # The compiled epoch itself: split over the two devices, and no device ever waits for the other.
    trainer = Trainer.create(TrainConfig(**small, seeds=4), data)
    state = trainer.init_state()
    x = jax.device_put(data.x_train)
    hlo = trainer.lower_epoch(state, (x, jax.device_put(data.y_train)))
    compiled = hlo.compile()
    out["program"] = {"devices": len(jax.tree.leaves(compiled.input_shardings[0][0])[0].device_set),
                      "collectives": [op for op in ("all-reduce", "all-gather", "all-to-all", "collective-permute",
                                                    "reduce-scatter") if op in compiled.as_text()]}
    print(json.dumps(out))
""")


def test_members_spread_over_devices_are_still_the_single_runs():
    # Two CPU devices, each training half the members: a member never meets the others, so it is still
    # the run `--seed k` bit for bit (its program is the single run's); vmapped groups and a sweep's
    # learning rates given as inputs reassociate as on one device.
    proc = subprocess.run([sys.executable, "-c", SPREAD_CHECK, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs.pop("program") == {"devices": 2, "collectives": []}
    for name, run in runs.items():
        assert run["devices"] == 2 and run["spec"] == "P('members',)", name
    assert runs["seeds-dropout"]["max_diff"] == 0.0
    assert 0.0 < runs["vmapped-groups-of-2"]["max_diff"] <= ATOL
    assert runs["sweep"]["max_diff"] <= ATOL


# The CLI in a fresh process on a machine that lets it use two cores, whatever this one has.
TWO_CORES = ("import sys; import jaxintro.parallel as p; p.usable_cores = lambda: 2; from jaxintro.cli import main; "
             "sys.exit(main())")


def test_a_spread_run_resumes_and_reports_its_devices(tmp_path):
    # No --devices: the CLI creates one CPU device per core before JAX starts, for a new run and for
    # --resume alike; checkpoints written from two devices restore into a resumed run that ends where an
    # uninterrupted one does.
    def train(*argv: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", TWO_CORES, "train", *argv, "--json"],
                              capture_output=True, text=True, timeout=600, env={**os.environ, "LANG": "C.UTF-8"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "spread over 2 CPU devices" in proc.stdout
        return json.loads(proc.stdout.strip().splitlines()[-1])

    flags = ("--dataset", "digits", "--seeds", "4", "--hidden", "32")
    first = train(*flags, "--epochs", "1", "--run-dir", str(tmp_path / "run"))
    assert first["member_devices"] == 2
    resumed = train("--resume", str(tmp_path / "run"), "--epochs", "2")
    straight = train(*flags, "--epochs", "2", "--run-dir", str(tmp_path / "straight"))
    assert resumed["member_devices"] == straight["member_devices"] == 2
    assert resumed["members"] == straight["members"]
    from jaxintro.evaluate import load_run

    assert_trees_close(load_run(tmp_path / "run").params, load_run(tmp_path / "straight").params, atol=0.0)


def test_usable_cores_respect_a_containers_cpu_quota(monkeypatch, tmp_path):
    from jaxintro import parallel

    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(parallel, "CPU_QUOTA", quota)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # a host with 8 cores
    assert parallel.usable_cores() == 8  # no cgroup file: the affinity mask
    quota.write_text("max 100000\n")
    assert parallel.usable_cores() == 8
    quota.write_text("200000 100000\n")  # a container given 2 of the 8
    assert parallel.usable_cores() == 2
    quota.write_text("50000 100000\n")  # half a CPU still runs one device
    assert parallel.usable_cores() == 1


def test_members_spread_over_the_cores_they_split_evenly(monkeypatch):
    from jaxintro import members, parallel

    monkeypatch.setattr(members, "usable_cores", lambda: 2)
    assert [members.cpu_devices_wanted(TrainConfig(seeds=n)) for n in (1, 2, 3, 8)] == [1, 2, 1, 2]
    assert members.cpu_devices_wanted(TrainConfig(seeds=8, devices=4)) == 4  # told: as many as asked
    monkeypatch.setattr(members, "usable_cores", lambda: 16)
    assert [members.cpu_devices_wanted(TrainConfig(seeds=n)) for n in (6, 7, 12, 40)] == [6, 7, 12, 10]
    assert members.cpu_devices_wanted(TrainConfig(lr_grid=(1e-3, 3e-3), seeds=3)) == 6
    # In a process that already started JAX, members use the CPU devices it has (those that split them
    # evenly); on an accelerator they stay on its one device, vmapped, unless told.
    monkeypatch.setattr(parallel.jax, "devices", lambda *backend: ["cpu"] * 4)
    monkeypatch.setattr(parallel.jax, "default_backend", lambda: "cpu")
    assert [members.member_devices(TrainConfig(seeds=n)) for n in (8, 6, 3, 1)] == [4, 3, 3, 1]
    assert members.member_devices(TrainConfig(seeds=8, devices=2)) == 2
    monkeypatch.setattr(parallel.jax, "default_backend", lambda: "gpu")
    assert members.member_devices(TrainConfig(seeds=8)) == 1


def test_a_sweep_member_is_the_run_with_its_learning_rate(data):
    result = fit(TrainConfig(**SMALL, lr_grid=(1e-3, 3e-3), seeds=1, optimizer="adamw",
                             weight_decay_grid=(1e-4, 1e-1)), data, log=quiet)
    grid = member_grid(result_config := TrainConfig(**SMALL, lr_grid=(1e-3, 3e-3), optimizer="adamw",
                                                    weight_decay_grid=(1e-4, 1e-1)))
    assert [(m.lr, m.weight_decay) for m in grid] == [(1e-3, 1e-4), (1e-3, 1e-1), (3e-3, 1e-4), (3e-3, 1e-1)]
    assert result_config.members == 4
    for k, m in enumerate(grid):
        single = fit(TrainConfig(**SMALL, lr=m.lr, weight_decay=m.weight_decay, optimizer="adamw"), data, log=quiet)
        assert_trees_close(member(result.state.params, k), single.state.params)


def test_a_sweep_with_a_schedule_scales_each_members_peak(data):
    config = TrainConfig(**SMALL, lr_grid=(1e-3, 3e-3), schedule="warmup-cosine", warmup_steps=5)
    result = fit(config, data, log=quiet)
    single = fit(TrainConfig(**SMALL, lr=3e-3, schedule="warmup-cosine", warmup_steps=5), data, log=quiet)
    assert_trees_close(member(result.state.params, 1), single.state.params)
    assert result.history[-1].members["learning_rate"][1] == pytest.approx(single.history[-1].learning_rate)


def test_a_sweep_compiles_its_epoch_once(data):
    compiled: list[str] = []

    def listen(event: str, seconds: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        result = fit(TrainConfig(**{**SMALL, "epochs": 2}, lr_grid=(1e-4, 3e-4, 1e-3, 3e-3), seeds=2), data, log=quiet)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert len(result.history) == 2
    assert sum("members_epoch" in name for name in compiled) == 1, compiled
    # One program, yet each member trained with its own rate: the rates are in the state, and the
    # members that share a seed but not a rate ended apart.
    lrs = result.state.opt_state.hyperparams["learning_rate"]
    np.testing.assert_allclose(np.asarray(lrs), [1e-4] * 2 + [3e-4] * 2 + [1e-3] * 2 + [3e-3] * 2, rtol=1e-6)
    first, last = member(result.state.params, 0), member(result.state.params, 6)  # seed 0 at 1e-4 and 3e-3
    assert max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(first), jax.tree.leaves(last))) > 1e-3
    # The learning rates are inputs of the program, not constants baked into it: another grid of the same
    # size lowers to the very same program, and so do two plain runs with different rates (every run's rate is an
    # input), while another batch size is another program.
    def epoch_text(config: TrainConfig) -> str:
        trainer = Trainer.create(config, data)
        state = trainer.init_state()
        return trainer.lower_epoch(state, (data.x_train, data.y_train)).as_text()

    assert epoch_text(TrainConfig(**SMALL, lr_grid=(1e-4, 1e-3))) == epoch_text(TrainConfig(**SMALL, lr_grid=(0.5, 0.7)))
    assert epoch_text(TrainConfig(**SMALL, lr=1e-4)) == epoch_text(TrainConfig(**SMALL, lr=1e-3))
    assert epoch_text(TrainConfig(**SMALL, lr=1e-4)) != epoch_text(TrainConfig(**{**SMALL, "batch_size": 16}))


def test_the_ensemble_averages_the_members_probabilities():
    model = build_model("jax", 12, (8,), 5)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(1), 3))
    x = jax.random.uniform(jax.random.key(2), (6, 12))
    probs = jax.vmap(lambda p: jax.nn.softmax(model.apply(p, x, None)))(params)
    ensemble = ensemble_model(model)
    np.testing.assert_allclose(np.exp(ensemble.apply(params, x)), np.mean(probs, 0), rtol=1e-5)
    # A diverged member (NaN parameters) is left out of the average rather than poisoning it.
    broken = jax.tree.map(lambda leaf: leaf.at[2].set(jnp.nan), params)
    np.testing.assert_allclose(np.exp(ensemble.apply(broken, x)), np.mean(probs[:2], 0), rtol=1e-5)
    # The choice is per image: an image is averaged over the same members whatever else is in its batch.
    overflow = x.at[0].set(jnp.inf)  # every member's probabilities for image 0 are NaN now
    out = np.exp(ensemble.apply(params, overflow))
    np.testing.assert_allclose(out[1:], np.exp(ensemble.apply(params, x[1:])), rtol=1e-5)
    np.testing.assert_allclose(out[1:], np.mean(probs[:, 1:], 0), rtol=1e-5)


def test_one_evaluation_scores_every_member_and_the_ensemble(data):
    model = build_model("jax", data.num_features, (32, 16), data.num_classes)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(3), 3))
    x, y = data.x_test, data.y_test
    correct, loss = count_correct(params, x, y, model=members_and_ensemble(model), chunk=100)  # 256 = 2 x 100 + 56
    assert correct.shape == loss.shape == (4,)
    for k in range(3):
        own_correct, own_loss = count_correct(member(params, k), x, y, model=model, chunk=100)
        assert int(correct[k]) == int(own_correct)
        np.testing.assert_allclose(loss[k], own_loss, rtol=1e-5)
    ensemble_correct, ensemble_loss = count_correct(params, x, y, model=ensemble_model(model), chunk=100)
    assert int(correct[3]) == int(ensemble_correct)
    np.testing.assert_allclose(loss[3], ensemble_loss, rtol=1e-5)


def test_a_diverged_member_is_reported_and_left_out(data, monkeypatch):
    from jaxintro import train

    config = TrainConfig(**SMALL, optimizer="sgd", lr_grid=(0.1, 1e12), seeds=1)
    scored, real = [], train.score_unseen

    def spy(eval_fn, params, test, held_out, diverged, *, ends):
        scored.append((held_out is None, sorted(diverged)))
        return real(eval_fn, params, test, held_out, diverged, ends=ends)

    monkeypatch.setattr(train, "score_unseen", spy)
    with pytest.warns(RuntimeWarning, match="member 1 diverged"):
        result = fit(config, data, log=quiet)
    # The epoch it diverged in scores the test set again, without it (the ensemble's number is of those used).
    assert scored == [(True, []), (True, [1])]
    last = result.history[-1]
    assert math.isfinite(last.members["test_accuracy"][0]) and math.isnan(last.members["test_accuracy"][1])
    assert last.test_accuracy == last.members["test_accuracy"][0]
    assert last.as_row()["members"]["test_accuracy"][1] is None  # JSON null, not NaN
    # A sweep's row is about its best setting (lr 0.1's one seed): no ensemble of members of different settings.
    assert last.ensemble_test_accuracy is None and last.learning_rate == 0.1


def test_every_member_diverging_is_one_clear_error_and_leaves_no_folder(tmp_path, capsys):
    run = tmp_path / "r"
    argv = ["train", "--dataset", "digits", "--epochs", "2", "--seeds", "2", "--run-dir", str(run)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a warning per member, then a run of NaNs: one error
        assert main([*argv, "--optimizer", "sgd", "--lr", "1e11"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jaxintro train: training diverged: loss reached ") and "exploded) at epoch 1, step " in err
    assert "lower --lr" in err and "no epoch finished" in err and "Traceback" not in err
    assert not run.exists()  # nothing half-written: no claim, config or checkpoint left to resume or puzzle
    assert main(argv) == 0  # the folder is free for the corrected command


def run_json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_seeds_run_reports_members_ensemble_and_evaluates_the_same(tmp_path, capsys):
    run = tmp_path / "seeds"
    called = time.perf_counter()
    summary = run_json(capsys, "train", "--dataset", "digits", "--epochs", "2", "--seeds", "3", "--seed", "4",
                       "--run-dir", str(run), "--json")
    elapsed = time.perf_counter() - called
    members = summary["members"]
    assert [m["seed"] for m in members] == [4, 5, 6] and summary["member_count"] == 3
    accuracies = [m["test_accuracy"] for m in members]
    assert summary["test_accuracy"] == pytest.approx(np.mean(accuracies))
    assert summary["test_accuracy_std"] == pytest.approx(np.std(accuracies, ddof=1))
    assert summary["param_count"] == 64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10  # one model's
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and len(rows[-1]["members"]["test_accuracy"]) == 3
    # Where the process's time went: every phase measured, and the phases add up to the whole.
    times = summary["time_breakdown"]
    assert times["train"] == summary["train_seconds"] and times["compile"] == summary["compile_seconds"]
    assert all(times[name] > 0 for name in ("setup", "data", "init", "compile", "train", "eval", "checkpoint", "plot"))
    # No phase overlaps another: `other` (the rest) is clipped at 0, so a phase counted twice would push
    # the parts past the whole. And the whole is the call's own time, measured here: nothing left out.
    assert sum(v for k, v in times.items() if k != "total") == pytest.approx(times["total"])
    assert 0.5 * elapsed <= times["total"] <= elapsed
    assert (run / "curves.png").stat().st_size > 0

    evaluated = run_json(capsys, "evaluate", str(run), "--json")
    assert evaluated["member_test_accuracy"] == pytest.approx(accuracies)
    assert evaluated["test_accuracy"] == pytest.approx(summary["ensemble_test_accuracy"])

    assert main(["train", "--resume", str(run), "--epochs", "3"]) == 0
    out = capsys.readouterr().out
    assert "Resuming" in out and "mean ± std of 3 members" in out
    straight = tmp_path / "straight"
    run_json(capsys, "train", "--dataset", "digits", "--epochs", "3", "--seeds", "3", "--seed", "4",
             "--run-dir", str(straight), "--json")
    from jaxintro.evaluate import load_run

    assert_trees_close(load_run(run).params, load_run(straight).params)


@pytest.fixture(scope="module")
def two_seeds_run(tmp_path_factory) -> Path:
    """`train --seeds 2` for one epoch on the digits, made once per test run; the tests only read it."""
    def make(folder: Path) -> None:
        assert main(["train", "--dataset", "digits", "--epochs", "1", "--seeds", "2", "--run-dir",
                     str(folder / "seeds")]) == 0

    return once_per_run(tmp_path_factory, "two-seeds", make)[0] / "seeds"


def test_predict_says_it_uses_the_ensemble(two_seeds_run, tmp_path, capsys):
    from PIL import Image

    run = two_seeds_run
    image = tmp_path / "digit.png"
    pixels = np.zeros((8, 8), np.uint8)
    pixels[1:7, 3:5] = 255
    Image.fromarray(pixels).save(image)
    assert main(["predict", str(run), str(image), "--json"]) == 0
    out = capsys.readouterr().out
    assert "holds 2 models: these are the probabilities of the ensemble of its 2 members" in out
    # The probabilities printed are the mean of the two members' own softmax probabilities, not one member's.
    from jaxintro.evaluate import load_run
    from jaxintro.images import load_image
    from jaxintro.lesson import scale_images

    loaded = load_run(run)
    x = scale_images(jnp.asarray(load_image(image, (8, 8))[None]))
    each = [np.asarray(jax.nn.softmax(loaded.member_model.apply(member(loaded.all_params, k), x, None)))[0]
            for k in range(2)]
    printed = json.loads(out.strip().splitlines()[-1])["probabilities"]
    got = np.array([printed[str(c)] for c in range(10)])
    np.testing.assert_allclose(got, (each[0] + each[1]) / 2, atol=1e-6)
    assert np.abs(each[0] - each[1]).max() > 1e-3  # two different models: the mean is neither of them


@pytest.mark.parametrize("style", ["linen", "nnx", "equinox"])
def test_sweep_works_for_every_model_style_with_dropout(tmp_path, capsys, style):
    summary = run_json(capsys, "sweep", "--dataset", "digits", "--epochs", "1", "--model", style, "--dropout", "0.1",
                       "--lr", "1e-3,3e-3", "--seeds", "2", "--run-dir", str(tmp_path / "sweep"), "--json")
    settings = summary["settings"]
    assert [s["lr"] for s in settings] == [1e-3, 3e-3] and summary["member_count"] == 4
    assert summary["best"]["test_accuracy"] == max(s["test_accuracy"] for s in settings)
    assert all(0.0 < s["test_accuracy"] <= 1.0 for s in settings)
    assert (tmp_path / "sweep" / "sweep.png").stat().st_size > 0


def test_sweep_table_names_the_best_setting(tmp_path, capsys):
    assert main(["sweep", "--dataset", "digits", "--epochs", "2", "--lr", "1e-4,1e-2", "--seeds", "2",
                 "--run-dir", str(tmp_path / "sweep")]) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "sweep" / "result.json").read_text())
    best = result["best"]
    assert f"Best: lr {best['lr']:g}" in out
    # 1e-2 learns far more than 1e-4 in two epochs on the digits.
    assert best["lr"] == 1e-2 and result["settings"][1]["test_accuracy"] > result["settings"][0]["test_accuracy"]


def test_memory_estimate_refuses_what_would_not_fit():
    config = TrainConfig(seeds=8)
    sizes = (784, 256, 128, 10)
    need = estimate_memory_bytes(config, sizes, 60_000)
    # Parameters, moments, gradients, update, new values: 235,146 floats per member, six copies; the data once.
    assert need > 8 * 6 * 4 * 235_146 + 60_000 * 784
    assert check_memory(config, sizes, 60_000, available=64 * 2**30) == need
    with pytest.raises(ConfigError, match=r"8 members need about .* GiB.*at most about 4 at once"):
        check_memory(config, sizes, 60_000, available=int(need / 0.6 / 2 + 1))
    # The plan keeps a margin: filling 80% of what is available is already refused.
    with pytest.raises(ConfigError, match="members need about"):
        check_memory(config, sizes, 60_000, available=int(need / 0.8))


def test_too_many_members_for_memory_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    from jaxintro import memory

    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2 * 2**30)  # whatever this machine has
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--seeds", "5000", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "5000 members need about" in err and "GiB available" in err and len(err.strip().splitlines()) == 1
    assert not run.exists()


@pytest.mark.parametrize("argv, message", [
    (["train", "--seeds", "0"], "--seeds: expected an integer >= 1"),
    (["train", "--seeds", "-3"], "--seeds: expected an integer >= 1"),
    (["sweep", "--lr", "1e-3", "--seeds", "1"], "a sweep compares several models"),
    (["train", "--seeds", "2", "--loop", "python"], "need --loop scan"),
    (["train", "--seeds", "3", "--devices", "2"], "3 members do not split evenly over --devices 2"),
    (["train", "--seeds", "2", "--parallel", "sharding"], "--parallel sharding splits one model's batch"),
    (["sweep", "--lr", "1e-3,3e-3", "--seeds", "3", "--devices", "4"], "6 members do not split evenly"),
    (["train", "--seeds", "2", "--coordinator", "127.0.0.1:12355", "--num-processes", "2", "--process-id", "1"],
     "several members (--seeds > 1, or a sweep) train in one process"),
    (["sweep", "--lr", ""], "--lr needs at least one value"),
    (["sweep", "--lr", "1e-3,fast"], "'fast' is not one"),
    (["sweep", "--lr", "1e-3,3e-3,1e-3"], "lists 0.001 twice"),
    (["sweep", "--lr=-1e-3"], "--lr must be a finite number"),
    (["sweep", "--weight-decay", "0,0.1"], "only acts with --optimizer adamw"),
])
def test_bad_member_flags_are_one_line_errors_and_write_nothing(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    try:  # argparse's own checks exit; the config's return the code
        code = main([*argv, "--dataset", "digits", "--run-dir", str(run)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not run.exists()


def test_serve_predicts_with_the_ensemble_and_says_so(two_seeds_run):
    from jaxintro import serve
    from jaxintro.evaluate import load_run, predict_proba

    run = two_seeds_run
    app = serve.load_app(run)
    info = app.run_info()
    assert info["members"] == 2 and info["model"] == "jax MLP 64-256-128-10: the ensemble of its 2 members"
    x = np.linspace(0, 1, 64, dtype=np.float32)
    answer = app.predict("input", x)
    loaded = load_run(run)
    members = np.stack([np.asarray(jax.nn.softmax(loaded.member_model.apply(member(loaded.params, k), x[None], None)))[0]
                        for k in range(2)])
    np.testing.assert_allclose(answer["probabilities"], members.mean(0), atol=1e-6)
    np.testing.assert_allclose(predict_proba(loaded, (x[None] * 255).astype(np.uint8))[0].sum(), 1.0, rtol=1e-5)


def test_a_setting_whose_members_all_diverged_is_null_in_strict_json(tmp_path, capsys):
    def strict(text: str) -> dict:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))

    with pytest.warns(RuntimeWarning, match="diverged"):
        assert main(["sweep", "--dataset", "digits", "--epochs", "1", "--optimizer", "sgd", "--lr", "0.1,1e11",
                     "--seeds", "2", "--run-dir", str(tmp_path / "sweep"), "--json"]) == 0
    out = capsys.readouterr().out
    summary = strict(out.strip().splitlines()[-1])
    assert strict((tmp_path / "sweep" / "result.json").read_text()) == summary
    good, bad = summary["settings"]
    assert bad["test_accuracy"] is None and bad["diverged"] == 2 and good["test_accuracy"] > 0.1
    assert summary["best"]["lr"] == 0.1 and summary["test_accuracy"] == good["test_accuracy"]


def test_one_seed_per_setting_claims_no_significance(tmp_path, capsys):
    assert main(["sweep", "--dataset", "digits", "--epochs", "1", "--lr", "1e-3,3e-3", "--seeds", "1",
                 "--run-dir", str(tmp_path / "sweep")]) == 0
    out = capsys.readouterr().out
    # No verdict against the seeds' spread: one seed has none ("spread over 2 CPU devices" may be said).
    assert "Best: lr" in out and "seeds' spread" not in out and "best of this grid" not in out


def test_members_train_one_at_a_time_on_a_cpu_unless_told():
    from jaxintro.members import group_size as member_group

    assert jax.default_backend() == "cpu"
    assert member_group(TrainConfig(seeds=8)) == 1 and member_group(TrainConfig(seeds=3)) == 1
    assert member_group(TrainConfig(seeds=8, member_group=8)) == 8
    assert member_group(TrainConfig(seeds=2, member_group=16)) == 2
    assert member_group(TrainConfig(lr_grid=(1e-3, 3e-3), seeds=4, member_group=3)) == 3
    # Spread over devices, a group is at most a device's share of the members.
    assert member_group(TrainConfig(seeds=8, member_group=8), devices=2) == 4
    assert member_group(TrainConfig(seeds=8, member_group=3), devices=2) == 3


def test_the_best_setting_is_never_a_diverged_one_wherever_it_is_listed():
    from jaxintro.grid import Setting, best_setting

    diverged = Setting(300.0, 0.0, [math.nan, math.nan], math.nan, math.nan)
    trained = [Setting(1e-3, 0.0, [0.9, 0.92], 0.91, 0.01), Setting(1e-2, 0.0, [0.95, 0.97], 0.96, 0.01)]
    for settings in ([diverged, *trained], [*trained, diverged], [trained[0], diverged, trained[1]]):
        assert best_setting(settings) is trained[1], settings  # a NaN mean first would win a plain max()


def test_a_setting_that_lost_a_seed_ranks_below_every_fully_trained_one():
    from jaxintro.grid import Setting, best_setting

    # A sweep's lr 300 with 2 of 4 seeds diverged averaged its survivors above lr 30, whose 4 seeds all trained.
    survivors = Setting(300.0, 0.0, [0.93, math.nan, 0.94, math.nan], 0.935, 0.007)
    trained = Setting(30.0, 0.0, [0.90, 0.91, 0.92, 0.90], 0.9075, 0.01)
    assert best_setting([survivors, trained]) is trained and best_setting([trained, survivors]) is trained
    tie = Setting(10.0, 0.0, [0.90, 0.91, 0.92, 0.90], 0.9075, 0.01)
    assert best_setting([tie, trained]) is tie and best_setting([trained, tie]) is trained  # the first listed
    assert best_setting([survivors, Setting(1e3, 0.0, [math.nan] * 3 + [0.1], 0.1, 0.0)]) is survivors


def test_a_model_too_big_is_refused_before_the_header_and_members_are_told_to_narrow(tmp_path, capsys):
    huge = ["--dataset", "digits", "--hidden", "65536,65536"]
    assert main(["train", *huge, "--run-dir", str(tmp_path / "one")]) == 2
    out, err = capsys.readouterr()
    assert "Training" not in out and "use narrower layers (--hidden)" in err and not (tmp_path / "one").exists()
    # Not even one member fits: fewer of them would not help, so the fix is the model's size.
    assert main(["sweep", *huge, "--lr", "1e-3,3e-3", "--seeds", "2", "--run-dir", str(tmp_path / "many")]) == 2
    out, err = capsys.readouterr()
    assert "Training" not in out and "use narrower layers (--hidden)" in err and "at most about 0" not in err


def test_a_model_replicated_over_cpu_devices_counts_a_copy_per_device():
    """CPU devices share the host's memory: the data-parallel model on two of them is estimated at two copies."""
    code = textwrap.dedent("""
        import json
        from jaxintro import train
        from jaxintro.config import TrainConfig
        from jaxintro.data import load_dataset
        from jaxintro.memory import estimate_memory_bytes
        from jaxintro.runtime import configure_jax
        configure_jax(devices=2, compile_cache=False)
        seen = []
        train.check_memory = lambda *args, **kwargs: seen.append(estimate_memory_bytes(*args, **{
            k: v for k, v in kwargs.items() if k in ("devices", "copies")}))
        data = load_dataset("digits")
        for devices in (1, 2):
            train.Trainer.create(TrainConfig(dataset="digits", hidden=(4096, 4096), devices=devices), data)
        print(json.dumps(seen))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = json.loads(proc.stdout.strip().splitlines()[-1])
    assert two > 1.8 * one  # the parameters, moments and activations twice; the data once per device


def test_a_sweep_chooses_its_setting_on_held_out_images_and_evaluate_uses_it(tmp_path, capsys):
    """The sweep trains on all but the last twelfth of the training set, scores those images after every epoch and
    chooses on them; `evaluate` (and so `predict`, `serve`) uses that setting. `--validation 0` would let the test
    set choose: refused."""
    run = tmp_path / "sweep"
    summary = run_json(capsys, "sweep", "--dataset", "digits", "--epochs", "2", "--lr", "1e-3,3e-3,1e-2", "--seeds",
                       "1", "--run-dir", str(run), "--json")
    held = 1437 // 12  # the digits' training set is 1,437 images
    assert summary["validation_images"] == held and json.loads((run / "config.json").read_text())["validation"] == held
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # each epoch's line, bold curve and headline: the setting its held-out images chose
        assert row["val_accuracy"] == max(row["members"]["val_accuracy"])
    # The test set is scored once, after the last epoch: no number of it exists while the sweep chooses.
    assert not any(key.startswith(("test", "ensemble")) for row in rows[:-1] for key in (*row, *row["members"]))
    last = rows[-1]
    val, test = last["members"]["val_accuracy"], last["members"]["test_accuracy"]
    assert last["test_accuracy"] == test[max(range(3), key=lambda k: (val[k], -k))]
    lrs = [1e-3, 3e-3, 1e-2]
    assert summary["best"]["lr"] == lrs[max(range(3), key=lambda k: (val[k], -k))]
    assert summary["best"]["test_accuracy"] == test[lrs.index(summary["best"]["lr"])]
    assert summary["test_chosen"]["lr"] == lrs[max(range(3), key=lambda k: (test[k], -k))]
    assert summary["best_val_accuracy"] == max(val)
    assert main(["evaluate", str(run)]) == 0
    assert f"Setting used: lr={summary['best']['lr']:g}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sweep", "--dataset", "digits", "--validation", "0"])
    assert "--validation" in capsys.readouterr().err


def test_train_with_held_out_images_reports_them_every_epoch(tmp_path, capsys, monkeypatch):
    from jaxintro import plots

    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append((  # what the legends say, what each line holds
        {text.get_text() for ax in fig.axes for text in ax.get_legend().get_texts()},
        {line.get_label(): list(line.get_ydata()) for ax in fig.axes for line in ax.get_lines()})) or path)
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--validation", "200", "--run-dir",
                 str(tmp_path / "run"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "Held out: the last 200 training images" in out and "1237 train" in out and "| Val Acc: " in out
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert 0.0 < row["val_accuracy"] <= 1.0 and row["val_loss"] > 0.0
    summary = json.loads(out.strip().splitlines()[-1])  # result.json and --json say it too, and the curves draw it
    assert summary["val_accuracy"] == row["val_accuracy"] == json.loads(
        (tmp_path / "run" / "result.json").read_text())["val_accuracy"]
    legends, lines = drawn[-1]
    assert {"held out", "held-out loss"} <= legends
    assert lines["held out"] == [100 * row["val_accuracy"]] and lines["held-out loss"] == [row["val_loss"]]
    assert main(["train", "--resume", str(tmp_path / "run"), "--validation", "100"]) == 2  # the run's own split
    assert "--validation" in capsys.readouterr().err


def test_a_run_with_held_out_images_scores_the_test_set_once_where_it_ends(tmp_path, capsys, monkeypatch):
    """Held-out images are scored after every epoch; the test set only after the epoch the run ends at: its last, or
    the one it was stopped after (a resume then scores it again at its own end). Without held-out images, after every
    epoch, as the lesson does."""
    from jaxintro import train

    test_size = 360  # the digits' test set
    scored = []
    real = train.score_unseen

    def spy(eval_fn, params, test, held_out, diverged, *, ends):
        result = real(eval_fn, params, test, held_out, diverged, ends=ends)
        scored.append(tuple(None if s is None else s.count for s in result))
        return result

    monkeypatch.setattr(train, "score_unseen", spy)
    assert main(["train", "--dataset", "digits", "--epochs", "3", "--validation", "200", "--run-dir",
                 str(tmp_path / "held")]) == 0
    assert scored == [(None, 200), (None, 200), (test_size, 200)]
    out = capsys.readouterr().out
    epochs = [line for line in out.splitlines() if line.startswith("Epoch")]
    assert ["Test Acc" in line for line in epochs] == [False, False, True] and all("Val Acc" in l for l in epochs)
    rows = [json.loads(line) for line in (tmp_path / "held" / "metrics.jsonl").read_text().splitlines()]
    assert [row.get("test_accuracy") is not None for row in rows] == [False, False, True]
    scored.clear()
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--run-dir", str(tmp_path / "lesson")]) == 0
    assert scored == [(test_size, None), (test_size, None)]
    scored.clear()
    config = TrainConfig(dataset="digits", epochs=4)
    trained, held_out = train.hold_out(load_dataset("digits"), 200, config.batch_size)
    result = train.fit(config, trained, validation=held_out, should_stop=lambda epoch: epoch == 2, log=lambda line: None)
    assert result.stopped_early and scored == [(None, 200), (test_size, 200)]
    assert [row.test_accuracy is not None for row in result.history] == [False, True]


def test_a_test_loss_that_overflows_where_a_held_out_run_ends_is_a_divergence(monkeypatch):
    """The held-out loss is checked after every epoch; the test set's too, in the epoch it is scored: an overflow
    there alone still ends the run as a divergence, as it does in the lesson's run."""
    from jaxintro import train
    from jaxintro.errors import TrainingDivergedError

    real = train.score_unseen

    def overflowing(*args, **kwargs):
        test, held_out = real(*args, **kwargs)
        return (None if test is None else test._replace(loss=np.float32(np.inf))), held_out

    monkeypatch.setattr(train, "score_unseen", overflowing)
    config = TrainConfig(dataset="digits", epochs=2)
    trained, held_out = train.hold_out(load_dataset("digits"), 200, config.batch_size)
    with pytest.raises(TrainingDivergedError, match="the test loss became inf after epoch 2"):
        train.fit(config, trained, validation=held_out, log=lambda line: None)

def test_the_choice_gap_script_trains_the_sweep_and_scores_the_test_set_every_epoch(tmp_path, capsys, monkeypatch):
    """`scripts/choice_gap.py` (docs/many-models) trains what `sweep` trains and scores the test set after every epoch
    itself: its last epoch's held-out pick reads the sweep's reported test accuracy, and each pick is the best of its
    column."""
    import runpy

    grid = ["--dataset", "digits", "--lr", "1e-3,1e-2", "--seeds", "1", "--epochs", "2"]
    script = Path(__file__).parents[1] / "scripts" / "choice_gap.py"
    monkeypatch.setattr(sys, "argv", [str(script), *grid])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[0] for row in rows] == ["1", "2"]
    summary = run_json(capsys, "sweep", *grid, "--run-dir", str(tmp_path / "sweep"), "--json")
    assert rows[-1][1] == f"lr={summary['best']['lr']:g}"
    assert float(rows[-1][2].rstrip("%")) == pytest.approx(100 * summary["best"]["test_accuracy"], abs=0.006)
    for _epoch, _held, held_test, _test_pick, test_test, gap in rows:  # the test set's pick reads highest
        assert float(test_test.rstrip("%")) >= float(held_test.rstrip("%")) and float(gap) >= 0
