"""`jaxintro profile`: trace warm training steps; print the op table, the cost analysis and a roofline.

Flags and the output folder are checked before JAX starts or data loads, as in `jaxintro train`.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from jaxintro.config import PROFILE_MAX_STEPS, config_from_flags
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError
from jaxintro.i18n import _, format_number, ngettext
from jaxintro.jsonio import json_text
from jaxintro.profile import profile_training
from jaxintro.runs import writable_dir, write_json

if TYPE_CHECKING:
    from jaxintro.config import TrainConfig
    from jaxintro.data import Dataset
    from jaxintro.profile import ProfileReport

TABLE_ROWS = 20  # the largest ops; the rest are summed into one row, so the column still adds up


def run(args: argparse.Namespace) -> int:
    """Profile `args.steps` warm steps of the configured training; print the report, write profile.json."""
    config = config_from_flags(args)
    if args.steps > PROFILE_MAX_STEPS:
        raise ConfigError(_("--steps {steps} is more than {most}: the trace records every op of every step, held in "
                            "memory and then read back whole; the op table is per step, so a few dozen steps are "
                            "what it needs").format(steps=args.steps, most=PROFILE_MAX_STEPS))
    if config.devices > 1:
        raise ConfigError(_("profile traces one device; drop --devices (each CPU device would show its own copy "
                            "of every op)"))
    out_dir = writable_dir(args.out, "--out")
    from jaxintro.runtime import configure_jax

    # No persistent cache: the HLO text, the cost analysis and the traced program come from one fresh compile.
    configure_jax(devices=config.devices, compile_cache=False, matmul_precision=config.matmul_precision)

    dataset = load_dataset(config.dataset, config.data_dir)
    print(heading(config, dataset, args.steps), flush=True)
    report = profile_training(config, dataset, steps=args.steps, out_dir=out_dir)
    summary = report.to_json()
    write_json(out_dir / "profile.json", summary)
    for line in report_lines(report):
        print(line)
    if args.json:
        print(json_text(summary))
    return 0


def heading(config: "TrainConfig", dataset: "Dataset", steps: int) -> str:
    """The line printed before anything compiles: what is profiled, on what."""
    layers = "-".join(map(str, (dataset.num_features, *config.hidden, dataset.num_classes)))
    warm = ngettext("{steps} warm training step", "{steps} warm training steps", steps).format(steps=steps)
    # In the number of models: one is "the MLP", several "MLPs trained together" (each its own batch).
    return ngettext("Profiling {warm} of the {model} MLP {layers} on {dataset} (batch {batch}, {optimizer}, "
                    "--loop {loop}) ...",
                    "Profiling {warm} of {members} {model} MLPs {layers} trained together (--seeds) on {dataset} "
                    "(batch {batch} each, {optimizer}, --loop {loop}) ...", config.members).format(
        warm=warm, members=config.members, model=config.model, layers=layers, dataset=dataset.name,
        batch=config.batch_size, optimizer=config.optimizer, loop=config.loop)


def report_lines(report: "ProfileReport") -> list[str]:
    """The printed report: what was traced, the op table, the cost analysis, the roofline, where the files are."""
    # What was traced, on which images: two noun phrases that the first sentence names.
    what = (_("the training program of `jaxintro train` (the shuffle, then one lax.scan over the batches), "
              "compiled for exactly these batches") if report.loop == "scan" else
            _("the lesson's loop (`python_epoch`: a shuffle, then one jitted step per batch from Python)"))
    if report.images_repeated:
        images = _("{images:,} images (the training set of {dataset}, repeated to fill {steps} batches)").format(
            images=report.images, dataset=report.dataset, steps=report.steps)
    else:
        images = _("the first {images:,} training images of {dataset}").format(images=report.images,
                                                                              dataset=report.dataset)
    lines = [
        _("Traced {steps} warm steps (compiled and run once before): {what}, on {images}.").format(
            steps=report.steps, what=what, images=images),
        _("Per step = the window's time / {steps}; the shuffle runs once per window (x/step below 1).").format(
            steps=report.steps),
        _("Step time: {untraced:.3f} ms untraced (median of 3 windows of {steps} steps), {traced:.3f} ms in the "
          "traced window.").format(untraced=report.untraced_step_s * 1e3, steps=report.steps,
                                   traced=report.traced_step_s * 1e3),
    ]
    if report.members > 1:  # one model's is its batch over the step time above; several models' is the point
        lines.append(_("Throughput: {rate} training images a second, all {members} models together (untraced).")
                     .format(rate=format_number(report.samples_per_s, ",.0f"), members=report.members))
    lines += ["", _("Ops per step, from the trace (us: the op's own time; wall us: its part of the step's wall clock, "
                    "shared with ops running at the same time on other threads; GFLOP/s: dots, over their own time)")]
    return lines + op_table_lines(report) + roofline_lines(report)


def op_table_lines(report: "ProfileReport") -> list[str]:
    """The op table: the largest ops per step, the rest summed, the gaps and the window's total."""
    table = report.table
    lines: list[str] = []
    programs = {row.program for row in table.rows}
    width = max([len(r.name) for r in table.rows[:TABLE_ROWS]] + [40])
    program_col = max(len(p) for p in programs) + 2 if len(programs) > 1 else 0
    # Column headings, each translated alone (the "% " of "% step" stays out of the catalog, where it would read as a
    # %-placeholder); a column widens to fit a longer translation. Op names, programs, kinds and sources are XLA's.
    heads = ["op", _("program"), _("kind"), _("x/step"), _("us/step"), _("wall us"), "% " + _("step"), "GFLOP/s",
             _("source")]
    program_col = max(program_col, len(heads[1]) + 1) if program_col else 0
    kind_col = max(14, len(heads[2]) + 1)
    w = [max(default, len(head) + 1) for head, default in zip(heads[3:8], (7, 10, 10, 8, 9))]
    header = (f"{heads[0]:<{width}}" + (f"{heads[1]:<{program_col}}" if program_col else "") + f"{heads[2]:<{kind_col}}"
              + "".join(f"{head:>{col}}" for head, col in zip(heads[3:8], w)) + f"  {heads[8]}")
    lines += [header, "-" * len(header)]
    for row in table.rows[:TABLE_ROWS]:
        rate = format_number(row.gflops, f"{w[4]}.1f") if row.gflops is not None else f"{'':{w[4]}}"
        numbers = [(row.calls_per_step, f">{w[0]}.2f"), (row.us_per_step, f">{w[1]}.1f"),
                   (row.wall_us_per_step, f">{w[2]}.1f"), (100 * row.share, f">{w[3] - 1}.1f")]
        lines.append(f"{row.name:<{width}}" + (f"{row.program:<{program_col}}" if program_col else "")
                     + f"{row.kind:<{kind_col}}" + "".join(format_number(v, spec) for v, spec in numbers)
                     + f"%{rate}  {row.source}")
    rest = table.rows[TABLE_ROWS:]
    pad = width + program_col + kind_col + w[0]

    def summary_row(label: str, wall_us: float, own_us: float | None = None) -> str:
        own = format_number(own_us, f">{w[1]}.1f") if own_us is not None else f"{'':>{w[1]}}"
        return (f"{label:<{pad}}{own}{format_number(wall_us, f'>{w[2]}.1f')}"
                f"{format_number(100 * wall_us / table.step_us, f'>{w[3] - 1}.1f')}%")

    if rest:
        lines.append(summary_row(ngettext("({n} more op)", "({n} more ops)", len(rest)).format(n=len(rest)),
                                 sum(r.wall_us_per_step for r in rest), sum(r.us_per_step for r in rest)))
    lines.append(summary_row(_("(no op running: gaps between ops)"), table.gaps_us_per_step))
    lines.append(summary_row(_("(outside the ops: dispatch, final sync)"), table.outside_us_per_step))
    lines.append("-" * len(header))
    lines.append(summary_row(_("total: the traced window's wall clock"), table.step_us))
    return lines


def roofline_lines(report: "ProfileReport") -> list[str]:
    """XLA's cost analysis against the measured roofline, and where the files are."""
    table, roof = report.table, report.roofline
    dots = sum(r.flops_per_call * r.calls_per_step for r in table.rows)
    cost = report.cost
    # `limited_by` is a JSON value ("compute" or "memory"): each has its own sentence here.
    bound = dict(intensity=roof.intensity, ridge=roof.ridge, gflops=roof.bound_gflops, ms=roof.bound_s * 1e3)
    return [
        "",
        _("XLA's cost analysis of the compiled step: {mflop:.1f} MFLOP, {mb:.2f} MB accessed, {ktrans:.1f} k "
          "transcendentals; matmuls alone: {analytic:.1f} MFLOP (bench.train_flops_per_step), {dots:.1f} MFLOP in the "
          "dots above").format(mflop=cost["flops"] / 1e6, mb=cost["bytes accessed"] / 1e6,
                               ktrans=cost["transcendentals"] / 1e3, analytic=report.analytic_flops / 1e6,
                               dots=dots / 1e6),
        _("Roofline, measured in this run (the higher of a measurement before and after the steps): matmul "
          "{peak:.1f} GFLOP/s (jitted {n}x{n}), memory {bandwidth:.1f} GB/s (in-place add over {mib} MiB)").format(
            peak=roof.peak_gflops, n=report.matmul_n, bandwidth=roof.bandwidth_gbs, mib=report.bandwidth_mib),
        (_("  intensity {intensity:.2f} FLOP/byte (ridge {ridge:.2f}): compute-bound, at most {gflops:.1f} GFLOP/s "
           "-> {ms:.3f} ms per step") if roof.limited_by == "compute" else
         _("  intensity {intensity:.2f} FLOP/byte (ridge {ridge:.2f}): memory-bound, at most {gflops:.1f} GFLOP/s "
           "-> {ms:.3f} ms per step")).format(**bound),
        _("  measured {ms:.3f} ms per step (untraced): {fraction:.0%} of the bound, {gflops:.1f} GFLOP/s").format(
            ms=roof.measured_s * 1e3, fraction=roof.fraction, gflops=roof.flops / roof.measured_s / 1e9),
        "",
        _("Trace: {path}").format(path=report.trace_file),
        _("  open it at https://ui.perfetto.dev (Open trace file), nothing to install; or "
          "`tensorboard --logdir {folder}` ({note})").format(folder=report.out_dir, note=tensorboard_note()),
        _("HLO of the traced programs (the op names above are instruction names there): {files}").format(
            files=", ".join(str(p) for p in report.hlo_files.values())),
        _("Report: {path}").format(path=Path(report.out_dir) / "profile.json"),
    ]


def tensorboard_note() -> str:
    """Whether TensorBoard's profile plugin, which reads the trace's xplane.pb, is installed here."""
    installed = any(importlib.util.find_spec(name) for name in ("tensorboard_plugin_profile", "xprof"))
    return (_("tensorboard-plugin-profile is installed") if installed else
            _("needs `pip install tensorboard tensorboard-plugin-profile`, not installed here"))
