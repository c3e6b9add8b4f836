"""`jaxintro profile`: trace warm training steps; print the op table, the cost analysis and a roofline.

Flags and the output folder are checked before JAX starts or data loads, as in `jaxintro train`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING

from jaxintro.config import config_from_flags
from jaxintro.errors import ConfigError

if TYPE_CHECKING:
    from jaxintro.profile import ProfileReport

TABLE_ROWS = 20  # the largest ops; the rest are summed into one row, so the column still adds up


def run(args: argparse.Namespace) -> int:
    """Profile `args.steps` warm steps of the configured training; print the report, write profile.json."""
    from jaxintro.runs import writable_dir

    config = config_from_flags(args)
    if config.devices > 1:
        raise ConfigError("profile traces one device; drop --devices (each CPU device would show its own copy "
                          "of every op)")
    out_dir = writable_dir(args.out, "--out")
    from jaxintro.runtime import configure_jax

    # No persistent cache: the HLO text, the cost analysis and the traced program come from one fresh compile.
    configure_jax(devices=config.devices, compile_cache=False)
    from jaxintro.data import load_dataset
    from jaxintro.profile import profile_training
    from jaxintro.runs import write_json

    dataset = load_dataset(config.dataset, config.data_dir)
    print(f"Profiling {args.steps} warm training steps of the {config.model} MLP "
          f"{'-'.join(map(str, (dataset.num_features, *config.hidden, dataset.num_classes)))} on {dataset.name} "
          f"(batch {config.batch_size}, {config.optimizer}, --loop {config.loop}) ...", flush=True)
    report = profile_training(config, dataset, steps=args.steps, out_dir=out_dir)
    summary = report.to_json()
    write_json(out_dir / "profile.json", summary)
    for line in report_lines(report):
        print(line)
    if args.json:
        print(json.dumps(summary))
    return 0


def report_lines(report: "ProfileReport") -> list[str]:
    """The printed report: what was traced, the op table, the cost analysis, the roofline, where the files are."""
    table, roof = report.table, report.roofline
    what = ("the training program of `jaxintro train` (one lax.scan over the batches, shuffle included), "
            "compiled for exactly these batches" if report.loop == "scan" else
            "the lesson's loop (`python_epoch`: a shuffle, then one jitted step per batch from Python)")
    images = (f"{report.images:,} images (the training set of {report.dataset}, repeated to fill {report.steps} "
              "batches)"
              if report.images_repeated else f"the first {report.images:,} training images of {report.dataset}")
    lines = [
        f"Traced {report.steps} warm steps (compiled and run once before): {what}, on {images}.",
        f"Per step = the window's time / {report.steps}; the shuffle runs once per window "
        f"(x/step below 1).",
        f"Step time: {report.untraced_step_s * 1e3:.3f} ms untraced (median of 3 windows of {report.steps} steps), "
        f"{report.traced_step_s * 1e3:.3f} ms in the traced window.",
        "",
        "Ops per step, from the trace (us: the op's own time; wall us: its part of the step's wall clock, "
        "shared with ops running at the same time on other threads; GFLOP/s: dots, over their own time)",
    ]
    programs = {row.program for row in table.rows}
    width = max([len(r.name) for r in table.rows[:TABLE_ROWS]] + [40])
    program_col = max(len(p) for p in programs) + 2 if len(programs) > 1 else 0
    header = (f"{'op':<{width}}" + (f"{'program':<{program_col}}" if program_col else "")
              + f"{'kind':<14}{'x/step':>7}{'us/step':>10}{'wall us':>10}{'% step':>8}{'GFLOP/s':>9}  source")
    lines += [header, "-" * len(header)]
    for row in table.rows[:TABLE_ROWS]:
        rate = f"{row.gflops:9.1f}" if row.gflops is not None else f"{'':9}"
        lines.append(f"{row.name:<{width}}" + (f"{row.program:<{program_col}}" if program_col else "")
                     + f"{row.kind:<14}{row.calls_per_step:>7.2f}{row.us_per_step:>10.1f}{row.wall_us_per_step:>10.1f}"
                     f"{100 * row.share:>7.1f}%{rate}  {row.source}")
    rest = table.rows[TABLE_ROWS:]
    pad = width + program_col + 14 + 7

    def summary_row(label: str, wall_us: float, own_us: float | None = None) -> str:
        own = f"{own_us:>10.1f}" if own_us is not None else f"{'':>10}"
        return f"{label:<{pad}}{own}{wall_us:>10.1f}{100 * wall_us / table.step_us:>7.1f}%"

    if rest:
        lines.append(summary_row(f"({len(rest)} more ops)", sum(r.wall_us_per_step for r in rest),
                                 sum(r.us_per_step for r in rest)))
    lines.append(summary_row("(no op running: gaps between ops)", table.gaps_us_per_step))
    lines.append(summary_row("(outside the ops: dispatch, final sync)", table.outside_us_per_step))
    lines.append("-" * len(header))
    lines.append(summary_row("total: the traced window's wall clock", table.step_us))

    dots = sum(r.flops_per_call * r.calls_per_step for r in table.rows)
    cost = report.cost
    lines += [
        "",
        f"XLA's cost analysis of the compiled step: {cost['flops'] / 1e6:.1f} MFLOP, "
        f"{cost['bytes accessed'] / 1e6:.2f} MB accessed, {cost['transcendentals'] / 1e3:.1f} k transcendentals; "
        f"matmuls alone: {report.analytic_flops / 1e6:.1f} MFLOP (bench.train_flops_per_step), "
        f"{dots / 1e6:.1f} MFLOP in the dots above",
        f"Roofline, measured in this run (the higher of a measurement before and after the steps): matmul "
        f"{roof.peak_gflops:.1f} GFLOP/s (jitted {report.matmul_n}x{report.matmul_n}), memory "
        f"{roof.bandwidth_gbs:.1f} GB/s (in-place add over {report.bandwidth_mib} MiB)",
        f"  intensity {roof.intensity:.2f} FLOP/byte (ridge {roof.ridge:.2f}): {roof.limited_by}-bound, "
        f"at most {roof.bound_gflops:.1f} GFLOP/s -> {roof.bound_s * 1e3:.3f} ms per step",
        f"  measured {roof.measured_s * 1e3:.3f} ms per step (untraced): {100 * roof.fraction:.0f}% of the bound, "
        f"{roof.flops / roof.measured_s / 1e9:.1f} GFLOP/s",
        "",
        f"Trace: {report.trace_file}",
        f"  open it at https://ui.perfetto.dev (Open trace file), nothing to install; or "
        f"`tensorboard --logdir {report.out_dir}` ({tensorboard_note()})",
        "HLO of the traced programs (the op names above are instruction names there): "
        + ", ".join(str(p) for p in report.hlo_files.values()),
        f"Report: {Path(report.out_dir) / 'profile.json'}",
    ]
    return lines


def tensorboard_note() -> str:
    """Whether TensorBoard's profile plugin, which reads the trace's xplane.pb, is installed here."""
    installed = any(importlib.util.find_spec(name) for name in ("tensorboard_plugin_profile", "xprof"))
    return ("tensorboard-plugin-profile is installed" if installed else
            "needs `pip install tensorboard tensorboard-plugin-profile`, not installed here")
