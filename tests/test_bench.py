"""The benchmark's rows train the same function; its FLOP count is right. Never timings."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import once_per_run, synthetic_dataset
from jaxintro import bench, bench_torch, timed
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.data import Dataset
from jaxintro.members import cpu_devices_wanted
from jaxintro.models.base import ACTIVATIONS
from jaxintro.train import Trainer


@pytest.fixture(scope="module")
def plan() -> bench.Plan:
    ds = synthetic_dataset(n_train=640, side=28)
    return bench.make_plan(ds.x_train, ds.y_train, seed=3, repeats=1, nojit_steps=3)


@pytest.fixture(scope="module")
def reference(plan) -> list[float]:
    return bench.run_row("scan-epoch", plan).losses


@pytest.mark.parametrize("row", ["nojit", "jit-step", "vmap-seeds-8", "spread-seeds-8", "torch-eager",
                                 "torch-compile"])
def test_every_row_trains_the_same_function(plan, reference, row):
    if row.startswith("torch"):  # only the PyTorch rows need PyTorch (installed by `make`)
        pytest.importorskip("torch")

    result = bench.run_row(row, plan)
    assert result.skipped is None, result.skipped
    assert len(result.losses) == 3
    # Same init, same three batches, same Adam: the same losses, step after step.
    np.testing.assert_allclose(result.losses, reference, rtol=2e-4)
    assert result.ms_per_step > 0 and result.samples_per_second > 0 and result.peak_rss_mb > 0
    assert result.compile_seconds >= 0  # 0 where a compile hides below the timing noise of an epoch


def test_flops_per_step_by_hand_and_by_xla():
    flops = bench.train_flops_per_step((784, 256, 128, 10), 128)
    forward = 2 * 128 * (784 * 256 + 256 * 128 + 128 * 10)
    assert flops == 2 * forward + 2 * 128 * (256 * 128 + 128 * 10)
    zeros = np.zeros((128, 784), np.uint8)
    ds = Dataset("z", zeros, np.zeros(128, np.int32), zeros[:8], np.zeros(8, np.int32), tuple("0123456789"),
                 (28, 28), "")
    trainer = Trainer.create(TrainConfig(), ds)
    state = trainer.init_state()
    compiled = jax.jit(trainer.step_fn()).lower(state.params, state.opt_state, (zeros, ds.y_train), None).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # XLA also counts the element-wise work (ReLU, softmax, Adam): a few percent more, never less.
    assert flops <= cost["flops"] <= 1.06 * flops


def small_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's matmul rate at a smaller size (3 s at 2048 on 2 cores): the tests read that it is there, not
    its value."""
    monkeypatch.setattr(bench, "measure_matmul_gflops", functools.partial(bench.measure_matmul_gflops, 256, 3))


@pytest.fixture(scope="module")
def bench_report(tmp_path_factory) -> tuple[dict, str, Path]:
    """One `bench` run for the three tests that read a report: its JSON, what it printed, and its folder.

    The rows run in their own processes (the no-jit row is checked above, in this one); the end-to-end jobs
    (PyTorch's among them) and the members pair train 2 epochs on the digits instead of 10: what is checked
    is what the report holds, not how fast.
    """
    pytest.importorskip("torch")

    def run_bench(out: Path) -> tuple[dict, str]:
        printed = io.StringIO()
        with pytest.MonkeyPatch.context() as monkeypatch, contextlib.redirect_stdout(printed):
            # `jaxintro train`'s processes with the scan loop only: the lesson's loop goes through the same timing
            # (`time_train_process`), and test_mnist_slow.py checks that it trains the same model.
            monkeypatch.setattr(timed, "end_to_end", functools.partial(timed.end_to_end, epochs=2, loops=("scan",)))
            monkeypatch.setattr(timed, "members_end_to_end", functools.partial(timed.members_end_to_end, epochs=2))
            small_matmul(monkeypatch)
            code = main(["bench", "--dataset", "digits", "--rows", "scan-epoch,vmap-seeds-8,spread-seeds-8",
                         "--repeats", "1", "--e2e", "--e2e-seeds", "2", "--out", str(out), "--json"])
        assert code == 0, printed.getvalue()[-3000:]
        return json.loads(printed.getvalue().strip().splitlines()[-1]), printed.getvalue()

    out, (report, printed) = once_per_run(tmp_path_factory, "bench-report", run_bench)
    return report, printed, out


def test_bench_cli_reports_every_field(bench_report):
    report, _, out = bench_report
    # Counted by hand for digits' 64 inputs: forward and weight-gradient matmuls of three layers, input
    # gradients of layers 2 and 3 (never of layer 1), 2 FLOPs per multiply-add.
    forward = 2 * 128 * (64 * 256 + 256 * 128 + 128 * 10)
    assert report["matmul_gflops"] > 0
    assert report["train_flops_per_step"] == 2 * forward + 2 * 128 * (256 * 128 + 128 * 10)
    names = [row["name"] for row in report["rows"]]
    assert names == ["scan-epoch", "vmap-seeds-8", "spread-seeds-8"]
    for row in report["rows"]:
        assert row["skipped"] is None
        for key in ("compile_seconds", "ms_per_step", "samples_per_second", "fraction_of_peak", "peak_rss_mb"):
            assert row[key] > 0
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "bench.json").read_text()) == report


def test_unknown_row_is_refused(capsys, tmp_path):
    assert main(["bench", "--rows", "scan-epoch,tpu", "--out", str(tmp_path)]) == 2
    assert "unknown tpu" in capsys.readouterr().err


def test_the_parent_opens_no_device_its_children_do(tmp_path):
    """On a TPU one process at a time holds the chip, and on a GPU a parent's preallocated memory would starve its
    children: the plan, the matmul rate and every row come from children, and the parent starts no JAX backend."""
    import subprocess
    import sys

    code = ("import jax._src.xla_bridge as xb\nfrom jaxintro.cli import main\n"
            f"code = main(['bench', '--dataset', 'digits', '--rows', 'scan-epoch', '--repeats', '1', '--out', "
            f"{str(tmp_path)!r}])\nprint('exit', code, 'backends', sorted(xb._backends))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "exit 0 backends []", done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads((tmp_path / "bench.json").read_text())["rows"][0]["ms_per_step"] > 0


def test_a_crashed_row_is_a_failure_not_a_skip(tmp_path, capsys, monkeypatch):
    def crash(name, plan_path, timeout=1200.0, cache=None):
        return bench.RowResult(name, error="exit 1: RuntimeError: boom")

    monkeypatch.setattr(bench, "run_row_subprocess", crash)
    small_matmul(monkeypatch)
    code = main(["bench", "--dataset", "digits", "--rows", "scan-epoch", "--repeats", "1", "--out", str(tmp_path),
                 "--json"])
    captured = capsys.readouterr()
    assert code == 2 and "FAILED: exit 1: RuntimeError: boom" in captured.out
    assert "1 row(s) crashed (scan-epoch)" in captured.err and "skipped:" not in captured.out
    row = json.loads((tmp_path / "bench.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert row["rows"][0]["error"].endswith("boom") and row["rows"][0]["ms_per_step"] is None


def test_a_failed_timed_train_process_is_one_error_line(monkeypatch, tmp_path):
    import subprocess

    from jaxintro.errors import JaxintroError

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], 3, stdout="", stderr="Traceback (most recent call last):\n  ...\nValueError: no data\n"))
    with pytest.raises(JaxintroError, match=r"failed \(exit 3\): ValueError: no data"):
        timed.time_train_process(["--dataset", "digits"], {})


def test_rounds_report_the_spread_of_each_row_and_ratio(tmp_path, capsys, monkeypatch):
    speeds = iter([2.0, 1.0, 3.0, 1.2, 2.5, 1.1])  # (jit-step, scan-epoch) per round

    def row(name, plan_path, timeout=1200.0, cache=None):
        return bench.RowResult(name, compile_seconds=1.0, ms_per_step=next(speeds), samples_per_second=1.0,
                               peak_rss_mb=1.0)

    monkeypatch.setattr(bench, "run_row_subprocess", row)
    small_matmul(monkeypatch)
    assert main(["bench", "--dataset", "digits", "--rows", "jit-step,scan-epoch", "--rounds", "3", "--out",
                 str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["spread"]["jit-step"]["ms_per_step"] == [2.0, 3.0]
    assert report["spread"]["scan-epoch"]["speedup"]["jit-step"] == [2.0, 2.5]  # 2/1, 3/1.2, 2.5/1.1
    assert [r["ms_per_step"] for r in report["rows"]] == [2.5, 1.1]  # each row's median round


def test_vmap_row_counts_all_its_models_and_the_members_pair_is_reported(bench_report):
    report, _, _ = bench_report
    rows = {row["name"]: row for row in report["rows"]}
    vmap = rows["vmap-seeds-8"]
    assert vmap["models"] == 8 and rows["scan-epoch"]["models"] == 1
    # The vmap row keeps its 8 models on one device; the spread row, in its own process, takes the devices
    # `train --seeds 8` would create here (one per core, as many as split 8 evenly).
    assert vmap["devices"] == rows["scan-epoch"]["devices"] == 1
    assert rows["spread-seeds-8"]["models"] == 8
    assert rows["spread-seeds-8"]["devices"] == cpu_devices_wanted(TrainConfig(seeds=8))
    # samples/s and the fraction of peak count the samples of all 8 models: per step, the vmap row moves 8
    # times the scan row's samples, and each sample costs both rows the same FLOPs.
    scan = rows["scan-epoch"]
    per_step = {name: r["samples_per_second"] * r["ms_per_step"] / 1e3 for name, r in (("vmap", vmap), ("scan", scan))}
    assert per_step == pytest.approx({"vmap": 8 * 128, "scan": 128})
    assert vmap["fraction_of_peak"] / vmap["samples_per_second"] == pytest.approx(
        scan["fraction_of_peak"] / scan["samples_per_second"])
    pair = report["members_end_to_end"]
    assert pair["seeds"] == 2 and pair["rounds"] == 1 and pair["epochs"] == 2
    assert pair["wall_ratio_range"] == pytest.approx((pair["wall_ratio"], pair["wall_ratio"]))  # one round
    assert pair["wall_ratio"] * pair["sequential"]["wall_seconds"] == pytest.approx(pair["one_process"]["wall_seconds"])
    assert pair["peak_rss_ratio"] * pair["sequential"]["peak_rss_mb"] == pytest.approx(pair["one_process"]["peak_rss_mb"])
    # Both sides trained the same two models, seeds 0 and 1 (on a CPU the members are the single runs bit
    # for bit): the same mean accuracy, up to the rounding of two ways of averaging.
    assert pair["one_process"]["test_accuracy"] == pytest.approx(pair["sequential"]["test_accuracy"], rel=1e-9)


def test_the_spread_compares_time_per_sample_when_a_row_trains_several_models():
    row = bench.RowResult
    rounds = [[row("scan-epoch", ms_per_step=1.0), row("vmap-seeds-8", ms_per_step=8.8, models=8)],
              [row("scan-epoch", ms_per_step=1.0), row("vmap-seeds-8", ms_per_step=7.2, models=8)]]
    spread = bench.range_over_rounds(rounds)
    assert spread["vmap-seeds-8"]["ms_per_step"] == (7.2, 8.8)
    assert spread["scan-epoch"]["speedup"]["vmap-seeds-8"] == pytest.approx((0.9, 1.1))


def test_the_lessons_own_script_trains_the_plans_model(plan, capsys):
    test = synthetic_dataset(n_train=640, n_test=200, side=28, seed=1)
    result = bench.lesson_job(plan, test.x_test, test.y_test, epochs=3)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("Epoch 1 | Loss: ")  # the lesson's own print
    # Ten classes: chance is 10%. The script really trains (on batches sliced from float32 host arrays).
    assert result["test_accuracy"] > 0.5 and result["peak_rss_mb"] > 0


def test_the_torch_job_trains_the_plans_model_on_the_plans_first_batches(plan):
    pytest.importorskip("torch")
    from jaxintro.train import fit

    test = synthetic_dataset(n_train=640, n_test=200, side=28, seed=1)
    result = bench_torch.torch_job(plan, test.x_test, test.y_test, epochs=1)
    assert set(result) == {"train_accuracy", "test_accuracy", "peak_rss_mb"} and result["peak_rss_mb"] > 0
    # Epoch 1 is the plan's init and batches: its running training accuracy is jaxintro's own for that epoch
    # (the same model, order and Adam; only float rounding may flip a prediction or two of the 640).
    dataset = Dataset("plan", plan.x, plan.y, test.x_test, test.y_test, tuple("0123456789"), (28, 28), "plan")
    ours = fit(TrainConfig(batch_size=plan.batch, seed=plan.seed, epochs=1), dataset, log=lambda _: None)
    assert result["train_accuracy"] == pytest.approx(ours.history[0].train_accuracy, abs=0.01)
    assert result["test_accuracy"] == pytest.approx(ours.history[0].test_accuracy, abs=0.02)


def test_bench_e2e_times_each_job_and_reports_what_each_trained(bench_report):
    report, printed, _ = bench_report
    jobs = {(r["loop"], r["cache"]): r for r in report["end_to_end"]}
    assert set(jobs) == {("lesson", "-"), ("torch-eager", "-"), ("scan", "cold"), ("scan", "warm")}
    for job, row in jobs.items():
        assert row["wall_seconds"] > 0 and row["peak_rss_mb"] > 0 and row["rounds"] == 1, job
        assert row["wall_range"] == [row["wall_seconds"], row["wall_seconds"]], job
        assert 0.5 < row["test_accuracy"] <= 1, job  # each really trained the digits model
    assert len(report["end_to_end_rounds"]) == 4
    # The warm process found the programs the cold one compiled: the same run.
    assert jobs[("scan", "warm")]["test_accuracy"] == jobs[("scan", "cold")]["test_accuracy"]
    # The cold process compiled into an empty cache, the warm one read it.
    assert (jobs[("scan", "cold")]["compile_cache"], jobs[("scan", "warm")]["compile_cache"]) == ("miss", "hit")
    for cache in ("cold", "warm"):
        assert report["train_vs_lesson"][cache] == pytest.approx(
            jobs[("scan", cache)]["wall_seconds"] / jobs[("lesson", "-")]["wall_seconds"])
    assert "jaxintro train (scan) / the lesson's script:" in printed


def test_end_to_end_rounds_keep_each_jobs_best_round_and_its_range():
    rows = [{"loop": "lesson", "cache": "-", "round": 0, "wall_seconds": 11.0},
            {"loop": "scan", "cache": "warm", "round": 0, "wall_seconds": 7.5},
            {"loop": "lesson", "cache": "-", "round": 1, "wall_seconds": 10.0},
            {"loop": "scan", "cache": "warm", "round": 1, "wall_seconds": 8.0}]
    best = {(r["loop"], r["cache"]): r for r in timed.best_of_rounds(rows)}
    assert best[("lesson", "-")]["round"] == 1 and best[("lesson", "-")]["wall_range"] == (10.0, 11.0)
    assert best[("scan", "warm")]["round"] == 0 and best[("scan", "warm")]["wall_range"] == (7.5, 8.0)
    assert best[("scan", "warm")]["rounds"] == 2


def test_the_matmul_only_ceiling_runs_the_steps_eight_products_and_nothing_else(plan):
    import jax

    epoch, sums = bench.matmul_only_epoch(plan)
    compiled = jax.jit(epoch).lower(sums).compile()
    assert compiled.as_text().count(" dot(") == 8  # 3 forward, 3 weight gradients, 2 input gradients
    # XLA counts the loop body once: the products' FLOPs plus one addition per weight into the carry.
    cost = compiled.cost_analysis()
    flops = (cost[0] if isinstance(cost, list) else cost)["flops"]
    weights = sum(a * b for a, b in zip(bench.SIZES[:-1], bench.SIZES[1:]))
    assert flops == pytest.approx(bench.train_flops_per_step(bench.SIZES, plan.batch) + weights, rel=1e-3)
    out = compiled(sums)
    assert all(float(abs(s).sum()) > 0 for s in out)  # every weight gradient was computed and kept


def test_the_vmap_row_vmaps_all_its_models_whatever_trains_default_group(plan):
    # `train --seeds` runs members one at a time on a CPU; the row named vmap-seeds-8 must batch all 8.
    def epoch_text(trainer: Trainer) -> str:
        state = trainer.init_state()
        return trainer.lower_epoch(state, (plan.x, plan.y)).as_text()

    # A member-batched matmul, e.g. h1[8,b,256] @ W2[8,256,128], batches the dot over the members' axis.
    member_batched = re.compile(r"dot_general[^\n]*batching_dims = \[0\] x \[0\]")
    trainer, _state, dataset = bench.jax_trainer(plan, 8)
    assert member_batched.search(epoch_text(trainer))
    assert not member_batched.search(epoch_text(Trainer.create(TrainConfig(batch_size=plan.batch, seeds=8), dataset)))


def test_the_plan_child_never_opens_an_accelerator(monkeypatch, tmp_path, plan):
    """The plan is drawn on the CPU (as `train` draws its weights): its child must not open, and so hold, a TPU."""
    seen = []

    def run(command, **kwargs):
        seen.append((kwargs.get("env") or os.environ).get("JAX_PLATFORMS"))
        plan.save(Path(command[5]))  # what the child writes: `plan DATA OUT ...`
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    bench.plan_in_child(plan.x, plan.y, tmp_path, seed=3, repeats=1, nojit_steps=3)
    assert seen == ["cpu"]


@pytest.mark.parametrize("activation", sorted({name for name, f in ACTIVATIONS.items()
                                                if f in bench_torch.TORCH_ACTIVATIONS} | {"tanh"}))
def test_the_pytorch_twin_mirrors_the_models_activation_or_says_it_cannot(activation, monkeypatch):
    """The twin reads the activation from the model (`models.Dense`), never assumes ReLU (tanh, put in both tables
    here, must come out as tanh), and its PyTorch module computes the same function (gelu's exact form is not JAX's
    tanh one, say): one it has no module for is refused by name, not silently swapped for a ReLU."""
    pytest.importorskip("torch")
    monkeypatch.setitem(ACTIVATIONS, "tanh", ACTIVATIONS.get("tanh", jax.numpy.tanh))
    monkeypatch.setitem(bench_torch.TORCH_ACTIVATIONS, ACTIVATIONS["tanh"], "Tanh")
    import torch

    from jaxintro.errors import JaxintroError
    from jaxintro.models import build_model

    model = build_model("jax", 6, (5,), 3, activation=activation)
    params = model.init(jax.random.key(0))
    params = {name: {"w": layer["w"], "b": layer["b"] + 0.1} for name, layer in params.items()}  # biases count
    layers = [(np.asarray(w), np.asarray(b)) for w, b in model.dense.layers(params)]
    x = np.asarray(3 * jax.random.normal(jax.random.key(1), (64, 6)), np.float32)  # well into the curves
    with torch.no_grad():
        twin = bench_torch.torch_mlp(layers, model.dense.activation)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(twin, model.apply(params, x), rtol=1e-6, atol=1e-6)

    def cube(v):
        return v**3

    with pytest.raises(JaxintroError, match="the PyTorch twin has no cube"):
        bench_torch.torch_mlp(layers, cube)


@pytest.mark.parametrize("lang, cells", [("en", "0.84     1.270     100,767    49.5%"),
                                         ("es", "0,84     1,270     100.767    49,5%")])
def test_the_table_writes_numbers_as_the_language_does(lang, cells, capsys):
    """In Spanish a comma is the decimal mark and a point groups thousands: 100,767 samples/s would read as 100.8."""
    from jaxintro import i18n
    from jaxintro.bench_plan import RowResult
    from jaxintro.commands.bench import print_table

    row = RowResult("scan-epoch", compile_seconds=0.84, ms_per_step=1.27, samples_per_second=100_767,
                    fraction_of_peak=0.495, peak_rss_mb=487)
    i18n.set_language(lang)  # put back to English after every test (conftest's isolated_cache)
    print_table([row], 205.1, 2048, 128.9e6)
    assert cells in capsys.readouterr().out


@pytest.mark.parametrize("name", ["scan-epoch", "spread-seeds-8"])  # the second sets JAX up itself (`configure_jax`)
def test_the_rows_of_a_run_share_one_compile_cache(name, tmp_path, plan, monkeypatch):
    """A program one child compiled, the next loads from the run's cache (compiled once, written once); the user's
    own `JAX_COMPILATION_CACHE_DIR` is not that cache (a row's compile would then be a load from an earlier run)."""
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "users"))
    plan_path, cache = tmp_path / "plan.npz", tmp_path / "xla"
    plan.save(plan_path)
    entries = []
    for _round in range(2):
        row = bench.run_row_subprocess(name, plan_path, cache=cache)
        assert row.error is None and row.ms_per_step > 0, row.error
        entries.append(sorted(p.name for p in cache.iterdir()))
    assert entries[0] and entries[1] == entries[0]  # the second child compiled nothing new
    assert "JAX_COMPILATION_CACHE_DIR" not in bench.child_env(cpu_only=False, cache=None)


def test_a_rows_compile_is_its_first_rounds():
    """The later rounds load the row's programs: the compile reported is the first round's, the speed the median's."""
    rounds = [bench.RowResult("scan-epoch", compile_seconds=c, ms_per_step=ms, peak_rss_mb=rss)
              for c, ms, rss in [(2.0, 3.0, 500.0), (0.1, 1.0, 400.0), (0.2, 2.0, 410.0)]]
    row = bench.median_round(rounds)
    assert (row.compile_seconds, row.ms_per_step, row.peak_rss_mb) == (2.0, 2.0, 500.0)
    assert rounds[2].compile_seconds == 0.2  # the rounds themselves are kept as measured
