"""`jaxintro profile`: the trace is read into a table that adds up, the FLOPs are right, bad input is one line.

No test asserts a time: the checks compare the trace with the wall clock of the same window, and
FLOP counts with the analytic count.
"""

from __future__ import annotations

import gzip
import json
import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from conftest import synthetic_dataset
from jaxintro import bench
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.errors import JaxintroError
from jaxintro.hlo import op_flops, op_kind, parse_hlo
from jaxintro.profile import (
    TraceOp,
    attribute_wall_time,
    op_table,
    profile_training,
    read_trace,
    roofline,
    trace_ops,
    window_images,
)

STEPS = 12
BATCH = 128


# ---------------------------------------------------------------- pure functions


def test_wall_time_is_split_between_overlapping_ops_and_loops_keep_only_their_own_time():
    # A loop [0, 100] runs A [10, 30] and, on another thread, B [20, 50]; nothing runs in [50, 60];
    # C [60, 90]. Outside the loop, D [120, 130] after a gap [100, 120].
    ops = [TraceOp("while.1", "m", 0, 100, 1), TraceOp("a", "m", 10, 20, 1), TraceOp("b", "m", 20, 30, 2),
           TraceOp("c", "m", 60, 30, 1), TraceOp("d", "m", 120, 10, 1)]
    walls, gaps, window = attribute_wall_time(ops, containers={("m", "while.1")})
    assert walls == pytest.approx({("m", "a"): 10 + 5, ("m", "b"): 5 + 20, ("m", "c"): 30, ("m", "d"): 10,
                                   ("m", "while.1"): 10 + 10 + 10})
    assert gaps == pytest.approx(20)
    assert window == pytest.approx(130)
    assert sum(walls.values()) + gaps == pytest.approx(window)


# A TPU v5e's trace of `jaxintro profile` (JAX 0.10.2, 6 December 2026), cut to its structure: the device's process,
# its "XLA Modules" thread (one event per program run) and its "XLA Ops" thread (one event per instruction).
TPU_TRACE = [
    {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
    {"ph": "M", "pid": 3, "tid": 2, "name": "thread_name", "args": {"name": "XLA Modules"}},
    {"ph": "M", "pid": 3, "tid": 3, "name": "thread_name", "args": {"name": "XLA Ops"}},
    {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
    {"ph": "X", "pid": 3, "tid": 2, "ts": 45707.651, "dur": 766.614, "name": "jit_train_epoch(9528402759442453667)"},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 45708.343, "dur": 0.006, "name": "copy-start",
     "args": {"hlo_category": "copy-start"}},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 45754.897, "dur": 714.885, "name": "while.1", "args": {"hlo_category": "while"}},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 45755.74, "dur": 0.018, "name": "fusion.163",
     "args": {"hlo_category": "loop fusion"}},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 45755.796, "dur": 0.995, "name": "gather_fusion.1",
     "args": {"hlo_category": "custom fusion"}},
    {"ph": "X", "pid": 701, "tid": 6938, "ts": 45700.0, "dur": 800.0, "name": "PjitFunction(train_epoch)"},
]


def test_an_accelerators_trace_is_read_from_its_device_timeline():
    """A TPU names no `hlo_op` on its events: its ops are its "XLA Ops" thread's, each in the program its "XLA
    Modules" thread ran then; the host's events are not ops."""
    assert trace_ops(TPU_TRACE) == [TraceOp("copy-start", "jit_train_epoch", 45708.343, 0.006, 3),
                                    TraceOp("while.1", "jit_train_epoch", 45754.897, 714.885, 3),
                                    TraceOp("fusion.163", "jit_train_epoch", 45755.74, 0.018, 3),
                                    TraceOp("gather_fusion.1", "jit_train_epoch", 45755.796, 0.995, 3)]
    cpu = [{"ph": "X", "ts": 1.0, "dur": 2.0, "tid": 7, "name": "dot.3",
            "args": {"hlo_op": "dot.3", "hlo_module": "jit_train_epoch"}}]
    assert trace_ops(cpu + TPU_TRACE) == [TraceOp("dot.3", "jit_train_epoch", 1.0, 2.0, 7)]  # a CPU's own events


def test_op_table_is_per_step_and_counts_dot_flops_from_the_hlo():
    a, b = jnp.ones((32, 64)), jnp.ones((64, 16))
    module = parse_hlo(jax.jit(lambda a, b: jnp.tanh(a @ b)).lower(a, b).compile().as_text())
    # What the program runs: the entry computation's ops (a fusion's dot is counted through the fusion).
    dots = [name for name in module.computations[module.entry] if op_flops(module, name)]
    assert dots, module.ops.keys()
    assert sum(op_flops(module, name) for name in dots) == 2 * 32 * 16 * 64  # 2*M*N*K
    # Two steps of this one dot, 10 us each, in a 25 us window, measured at 30 us of wall clock in all.
    ops = [TraceOp(dots[0], module.name, 0, 10, 1), TraceOp(dots[0], module.name, 15, 10, 1)]
    table = op_table(ops, {module.name: module}, steps=2, step_us=15.0)
    (row,) = table.rows
    assert (row.calls_per_step, row.us_per_step, row.wall_us_per_step) == (1.0, 10.0, 10.0)
    assert row.gflops == pytest.approx(2 * 32 * 16 * 64 / 10e3)
    assert (table.gaps_us_per_step, table.window_us_per_step, table.outside_us_per_step) == (2.5, 12.5, 2.5)


# A TPU's compiled step writes its matmuls as convolutions with no spatial dimensions, inside fusions (cut from the
# optimized HLO of `jit_train_epoch` on a TPU v5e, 6 December 2026): the first layer's forward product.
TPU_FUSION = """HloModule jit_train_epoch, entry_computation_layout={()->f32[128,256]{1,0}}

%fused_computation.13.clone.1 (param_0.665: f32[784,256], param_1.903: f32[128,784]) -> f32[128,256] {
  %param_1.903 = f32[128,784]{1,0:T(8,128)} parameter(1)
  %param_0.665 = f32[784,256]{1,0:T(8,128)S(1)} parameter(0)
  ROOT %convolution.25 = f32[128,256]{1,0:T(8,128)} convolution(%param_1.903, %param_0.665), dim_labels=bf_io->bf, metadata={op_name="jit(train_epoch)/while/body/closed_call/jvp()/dot_general" stack_frame_id=86}
}

ENTRY %main.1 () -> f32[128,256] {
  %a = f32[784,256]{1,0:T(8,128)} parameter(0)
  %b = f32[128,784]{1,0:T(8,128)} parameter(1)
  ROOT %fusion.172 = f32[128,256]{1,0:T(8,128)} fusion(%a, %b), kind=kOutput, calls=%fused_computation.13.clone.1
}
"""


def test_a_tpus_matmul_convolution_counts_its_flops():
    module = parse_hlo(TPU_FUSION)
    assert op_flops(module, "fusion.172") == 2 * 128 * 256 * 784  # 2*M*N*K, K the kernel's input features
    assert op_kind(module, "fusion.172") == "fusion (dot)"
    # A convolution with a window of 3: each output element is 3 times as many multiply-adds.
    spatial = parse_hlo(TPU_FUSION.replace("dim_labels=bf_io->bf", "dim_labels=b0f_0io->b0f").replace(
        "%param_0.665 = f32[784,256]{1,0:T(8,128)S(1)}", "%param_0.665 = f32[3,784,256]{2,1,0}"))
    assert op_flops(spatial, "fusion.172") == 2 * 128 * 256 * 784 * 3


def test_roofline_takes_the_lower_of_compute_and_memory():
    # 100 GFLOP/s and 10 GB/s: the ridge is at 10 FLOP/byte.
    low = roofline(flops=1e9, bytes_accessed=1e9, peak_gflops=100, bandwidth_gbs=10, measured_s=0.2)
    assert (low.intensity, low.bound_gflops, low.limited_by) == (1.0, 10.0, "memory")
    assert low.bound_s == pytest.approx(0.1) and low.fraction == pytest.approx(0.5)
    high = roofline(flops=1e9, bytes_accessed=1e6, peak_gflops=100, bandwidth_gbs=10, measured_s=0.01)
    assert (high.bound_gflops, high.limited_by, high.ridge) == (100.0, "compute", 10.0)


def test_a_short_dataset_repeats_to_fill_the_window():
    ds = synthetic_dataset(n_train=100)
    x, y, repeated = window_images(ds.x_train, ds.y_train, 250)
    assert repeated and x.shape == (250, ds.num_features) and (x[100:200] == ds.x_train).all()
    assert not window_images(ds.x_train, ds.y_train, 100)[2]


def test_a_file_that_is_not_a_gzipped_trace_is_a_one_line_error(tmp_path):
    bad = tmp_path / "perfetto_trace.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(JaxintroError, match="not a gzipped trace JSON"):
        read_trace(bad)


# ---------------------------------------------------------------- a real traced run, both loops


@pytest.fixture(scope="module", params=["scan", "python"])
def report(request, tmp_path_factory):
    """A profile of 12 steps of the lesson's 784-256-128-10 MLP on MNIST-shaped synthetic images."""
    ds = synthetic_dataset(n_train=STEPS * BATCH, side=28)
    config = TrainConfig(dataset="mnist", loop=request.param, batch_size=BATCH)  # the shapes of MNIST
    out = tmp_path_factory.mktemp(f"profile-{request.param}")
    # A small matmul and array: the roofline's inputs are measured, not checked, here.
    return profile_training(config, ds, steps=STEPS, out_dir=out, repeats=1, matmul_n=256, bandwidth_mib=8)


def test_the_table_adds_up_to_the_traced_window(report):
    table = report.table
    # Read the trace file here, independently of the table: its XLA op events, their window and count.
    with gzip.open(report.trace_file, "rt", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})]
    start = min(float(e["ts"]) for e in events)
    end = max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in events)
    assert table.window_us_per_step == pytest.approx((end - start) / STEPS, rel=1e-9)
    # Every op event is one call in the table, and the rows' shares of the wall clock are their time in it.
    assert sum(r.calls_per_step for r in table.rows) * STEPS == pytest.approx(len(events))
    assert sum(r.share for r in table.rows) == pytest.approx(table.ops_us_per_step / table.step_us, rel=1e-9)
    # Ops and gaps cover the window: no op time is lost or counted twice, and no op spans more than the window.
    assert table.ops_us_per_step + table.gaps_us_per_step == pytest.approx(table.window_us_per_step, rel=1e-9)
    assert all(0 <= r.wall_us_per_step <= table.window_us_per_step for r in table.rows)
    # Against the wall clock (perf_counter) of the same window: the trace cannot span more than it
    # (5% for the two clocks' rounding), and it misses only the dispatch before the first op and the
    # wake-up after the last, ~0.1-0.3 ms of a ~15 ms window; half of it leaves room for the scheduler of
    # a busy 2-core machine to delay that wake-up by a few slices (25% once failed under load).
    assert 0.5 * table.step_us <= table.window_us_per_step <= 1.05 * table.step_us
    # The report's traced time is the whole window's wall clock spread over its 12 steps, not 12 times that.
    assert 0.25 * report.traced_step_s * STEPS * 1e6 <= end - start <= 1.05 * report.traced_step_s * STEPS * 1e6


def test_the_dots_are_the_analytic_matmuls_and_xla_counts_a_little_more(report):
    analytic = bench.train_flops_per_step((784, 256, 128, 10), BATCH)
    assert report.analytic_flops == analytic
    dots = [r for r in report.table.rows if r.flops_per_call]
    # Eight matmuls a step (3 forward, 3 weight gradients, 2 input gradients), each once per step.
    assert sum(r.flops_per_call * r.calls_per_step for r in dots) == pytest.approx(analytic, rel=1e-12)
    assert all(r.calls_per_step == 1.0 and r.gflops > 0 for r in dots)
    # XLA also counts element-wise work: Adam's update (~10 flops for each of 235,146 parameters,
    # 1.8% of the 129 MFLOP), ReLU, log-softmax, x/255: a few percent more, never less.
    assert analytic <= report.cost["flops"] <= 1.10 * analytic
    assert report.cost["bytes accessed"] > 0
    assert report.roofline.flops == report.cost["flops"] and report.roofline.measured_s == report.untraced_step_s


def test_every_op_in_the_table_is_an_instruction_of_the_saved_hlo(report):
    texts = {name: path.read_text() for name, path in report.hlo_files.items()}
    for row in report.table.rows:
        assert re.search(rf"^\s*(ROOT )?%?{re.escape(row.name)} = ", texts[row.program], re.M), row


def test_the_trace_is_gzip_json_with_events_and_a_tensorboard_copy(report):
    with gzip.open(report.trace_file, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("args", {}).get("hlo_op") for e in events)
    assert report.trace_file.name == "perfetto_trace.json.gz" and report.trace_file.is_relative_to(report.out_dir)
    assert report.xplane_file is not None and report.xplane_file.stat().st_size > 0


@pytest.mark.parametrize("group", [1, 2, 3])
def test_several_models_are_one_step_of_all_of_them_costed_and_timed_together(group, tmp_path):
    """`profile --seeds 3`: the cost, the matmuls, the roofline and the throughput are the three models' step, in
    groups of one (the CPU's default: the epoch maps the single run's step), a vmapped group of two and the one left
    over, or one vmapped group of three."""
    ds = synthetic_dataset(n_train=4 * BATCH, side=8)
    small = dict(batch_size=BATCH, hidden=(32,))

    def profiled(name: str, **fields) -> Any:
        return profile_training(TrainConfig(**small, **fields), ds, steps=4, out_dir=tmp_path / name, repeats=1,
                                matmul_n=256, bandwidth_mib=8)

    one, three = profiled("one"), profiled("three", seeds=3, member_group=group)
    assert three.members == 3 and three.analytic_flops == 3 * one.analytic_flops
    # XLA's count of a step: three times one model's (a loop's body is counted once: the report multiplies it back),
    # exactly where each member runs the single run's own step, and to vmap's rearranging where a group is vmapped.
    exact = 1e-12 if group == 1 else 0.02
    assert three.cost["flops"] == pytest.approx(3 * one.cost["flops"], rel=exact)
    assert three.cost["bytes accessed"] == pytest.approx(3 * one.cost["bytes accessed"], rel=exact)
    dots = sum(r.flops_per_call * r.calls_per_step for r in three.table.rows if r.flops_per_call)
    assert dots == pytest.approx(three.analytic_flops, rel=1e-12)
    assert three.roofline.flops == three.cost["flops"] and three.roofline.measured_s == three.untraced_step_s
    assert three.samples_per_s == pytest.approx(3 * BATCH / three.untraced_step_s, rel=1e-12)
    assert three.to_json()["members"] == 3 and one.to_json()["members"] == 1


# ---------------------------------------------------------------- the command


def test_the_command_prints_the_report_and_writes_profile_json(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "--dataset", "digits", "--steps", "4", "--loop", "python", "--out", str(out),
                 "--json"]) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary == json.loads((out / "profile.json").read_text())
    assert summary["steps"] == 4 and summary["loop"] == "python" and summary["ops"]
    assert "ui.perfetto.dev" in stdout and summary["trace_file"] in stdout
    assert "Throughput:" not in stdout  # one model's is its batch over the step time printed above
    top = summary["ops"][0]["name"]
    assert re.search(rf"^{re.escape(top)} ", stdout, re.M)  # the table names the op as the HLO does


def test_the_command_profiles_several_models_trained_together(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "--dataset", "digits", "--steps", "2", "--seeds", "2", "--out", str(out), "--json"]) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["members"] == 2 and summary == json.loads((out / "profile.json").read_text())
    assert stdout.startswith("Profiling 2 warm training steps of 2 jax MLPs 64-256-128-10 trained together (--seeds) "
                             "on digits (batch 128 each, adam, --loop scan) ...\n")
    rate = f"{summary['samples_per_s']:,.0f}"
    assert f"Throughput: {rate} training images a second, all 2 models together (untraced)." in stdout


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps: expected an integer >= 1, got 0"),
    (["--dataset", "digits", "--devices", "2"], "profile traces one device; drop --devices"),
    (["--dataset", "digits", "--seeds", "2", "--loop", "python"], "several members (--seeds > 1, or a sweep) need"),
    (["--dataset", "digits", "--batch-size", "5000"], "--batch-size 5000 is larger than the 1437"),
    (["--dataset", "digits", "--out", "FILE"], "is not writable"),
])
def test_bad_input_is_a_one_line_error(argv, message, tmp_path, capsys):
    (tmp_path / "FILE").write_text("a file, not a folder")
    argv = [str(tmp_path / a) if a == "FILE" else a for a in argv]
    try:
        code = main(["profile", "--out", str(tmp_path / "out"), *argv])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_the_printed_table_writes_numbers_as_the_language_does(report):
    """Spanish: a decimal comma in every number of the op table (1,00 calls a step, 17,4%), English a point."""
    from jaxintro import i18n
    from jaxintro.commands.profile import report_lines

    def op_rows(lang: str) -> list[str]:
        try:
            i18n.set_language(lang)
            return [line for line in report_lines(report) if line.split(" ", 1)[0] in {r.name for r in report.table.rows}]
        finally:
            i18n.set_language("en")

    english, spanish = op_rows("en"), op_rows("es")
    assert english and len(english) == len(spanish)
    number = r"\s+(\d+[.,]\d+)"
    for en, es in zip(english, spanish):
        en_numbers, es_numbers = re.findall(number, en), re.findall(number, es)
        assert en_numbers and [n.replace(".", ",") for n in en_numbers] == es_numbers, (en, es)
