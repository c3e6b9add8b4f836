"""`jaxintro bench`: exercise 4, every way to train the MLP side by side, each row in its own process."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from jaxintro import timed
from jaxintro.config import BENCH_ROWS
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError, JaxintroError
from jaxintro.i18n import _, format_number, ngettext
from jaxintro.jsonio import json_safe, json_text
from jaxintro.runs import writable_dir, write_json


def run(args: argparse.Namespace) -> int:
    """Run the rows, print the table and ratios, write bench.json and bench.png; a crashed row is an error."""
    rows = checked_rows(args.rows)

    out_dir = writable_dir(args.out, "--out")
    from jaxintro import bench
    from jaxintro.plots import plot_bars

    dataset = load_dataset(args.dataset, args.data_dir)
    # This process opens no device (see `jaxintro.bench`): the plan and the matmul rate come from children, which
    # share one compile cache, empty at the start: each program compiles once, in the first child that runs it.
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp).resolve() / "xla"  # JAX keys its entries by the folder's path: one spelling for every child
        plan = bench.plan_in_child(dataset.x_train, dataset.y_train, Path(tmp), seed=args.seed, repeats=args.repeats,
                                   nojit_steps=args.nojit_steps, cache=cache)
        print_plan(args, dataset, plan)
        rate_before = bench.measure_matmul_gflops(cache=cache)
        rounds = run_rounds(plan, rows, args.rounds, cache)
        # The machine's rate, measured before and after the rows; the higher one is the peak we compare with.
        matmul_gflops, matmul_n = max(rate_before, bench.measure_matmul_gflops(cache=cache))
    flops = bench.train_flops_per_step((dataset.num_features, *bench.SIZES[1:-1], dataset.num_classes), plan.batch)
    results = [bench.median_round([r[i] for r in rounds]) for i in range(len(rows))]
    done = {r.name: r for r in results if not (r.skipped or r.error)}
    for r in done.values():
        r.fraction_of_peak = r.models * flops / (r.ms_per_step / 1e3) / (matmul_gflops * 1e9)
    report = rows_report(dataset.name, plan.batch, matmul_gflops, flops, results)
    print_table(results, matmul_gflops, matmul_n, flops)
    report.update(print_ratios(done, rounds, args.rounds))
    print_members_rows(done)
    data_args = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
    if args.e2e:
        report.update(end_to_end(data_args, plan, dataset, args.rounds))
    if args.e2e_seeds:
        report["members_end_to_end"] = members_end_to_end(data_args, args.e2e_seeds, args.rounds)
    if done:
        plot_bars(list(done), [r.samples_per_second for r in done.values()], out_dir / "bench.png",
                  ylabel=_("samples / s (higher is better)"),
                  title=_("MLP training throughput, {dataset}, batch {batch} (matmul peak {gflops:.0f} GFLOP/s)")
                  .format(dataset=dataset.name, batch=plan.batch, gflops=matmul_gflops))
    write_json(out_dir / "bench.json", report)
    print(_("Chart: {png}; numbers: {json}").format(png=out_dir / "bench.png", json=out_dir / "bench.json"))
    if args.json:
        print(json_text(report))
    failed = [r for r in results if r.error]
    if failed:
        raise JaxintroError(ngettext(
            "{count} row(s) crashed ({rows}); the first: {error}; the other rows are in {path}",
            "{count} row(s) crashed ({rows}); the first: {error}; the other rows are in {path}", len(failed),
        ).format(count=len(failed), rows=", ".join(r.name for r in failed), error=failed[0].error,
            path=out_dir / "bench.json"))
    return 0


def checked_rows(text: str) -> list[str]:
    """`--rows`, every name a known row (before anything starts)."""
    rows = [r for r in text.split(",") if r]
    unknown = sorted(set(rows) - set(BENCH_ROWS))
    if not unknown and not rows:
        raise ConfigError(_("--rows: unknown (none given); choose from {choices}").format(choices=", ".join(BENCH_ROWS)))
    if unknown:
        raise ConfigError(_("--rows: unknown {rows}; choose from {choices}").format(
            rows=", ".join(unknown), choices=", ".join(BENCH_ROWS)))
    return rows


def print_plan(args: argparse.Namespace, dataset: Any, plan: Any) -> None:
    """The line that says what every row trains on, and how it is timed."""
    facts = dict(dataset=dataset.name, images=len(dataset.x_train), steps=len(plan.perm), batch=plan.batch,
                 repeats=args.repeats, rounds=args.rounds)
    if args.rounds > 1:
        print(ngettext("Benchmark on {dataset} ({images} images, {steps} steps of {batch}); each row in its own "
                       "process, median of {repeats} epoch after a warm-up; {rounds} rounds of every row, interleaved.",
                       "Benchmark on {dataset} ({images} images, {steps} steps of {batch}); each row in its own "
                       "process, median of {repeats} epochs after a warm-up; {rounds} rounds of every row, "
                       "interleaved.",
                       args.repeats).format(**facts), flush=True)
    else:
        print(ngettext("Benchmark on {dataset} ({images} images, {steps} steps of {batch}); each row in its own "
                       "process, median of {repeats} epoch after a warm-up.",
                       "Benchmark on {dataset} ({images} images, {steps} steps of {batch}); each row in its own "
                       "process, median of {repeats} epochs after a warm-up.",
                       args.repeats).format(**facts), flush=True)


def run_rounds(plan: Any, rows: list[str], count: int, cache: Path) -> list[list[Any]]:
    """Every row in its own process, `count` rounds, the rows alternating round by round (a slow minute of the
    machine then falls on every row alike), all with the compile cache `cache`."""
    from jaxintro import bench

    rounds: list[list[Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.npz"
        plan.save(plan_path)
        for round_index in range(count):
            rounds.append([])
            for name in rows:
                if count > 1:
                    print(_("  running {row} (round {round} of {rounds}) ...").format(
                        row=name, round=round_index + 1, rounds=count), flush=True)
                else:
                    print(_("  running {row} ...").format(row=name), flush=True)
                rounds[-1].append(bench.run_row_subprocess(name, plan_path, cache=cache))
    return rounds


def rows_report(dataset: str, batch: int, matmul_gflops: float, flops: float, results: list[Any]) -> dict[str, Any]:
    """bench.json's machine facts and rows (a row that did not run has no numbers: null, not NaN, which JSON lacks)."""
    keys = ("name", "compile_seconds", "ms_per_step", "samples_per_second", "fraction_of_peak", "peak_rss_mb",
            "models", "devices", "skipped", "error")
    return {"dataset": dataset, "batch_size": batch, "matmul_gflops": matmul_gflops, "train_flops_per_step": flops,
            "rows": [json_safe({k: getattr(r, k) for k in keys}) for r in results]}


def print_table(results: list[Any], matmul_gflops: float, matmul_n: int, flops: float) -> None:
    """The machine's matmul rate, then one line per row (a skipped or crashed row says why)."""
    from jaxintro import bench

    print("\n" + _("float32 matmul rate (jitted {n}x{n}): {gflops:.1f} GFLOP/s; training FLOPs per step "
                   "(forward + backward matmuls): {mflops:.1f} M").format(n=matmul_n, gflops=matmul_gflops,
                                                                          mflops=flops / 1e6))
    # Column headings, each translated alone; a column widens to fit a longer translation. The row names stay.
    heads = [_("row"), _("compile s"), _("ms/step"), _("samples/s"), _("of peak"), _("peak RSS MB")]
    w = [14] + [max(width, len(head) + 1) for head, width in zip(heads[1:], (10, 10, 12, 9, 13))]
    header = f"{heads[0]:<{w[0]}}" + "".join(f"{head:>{width}}" for head, width in zip(heads[1:], w[1:]))
    print(header + "\n" + "-" * len(header))
    for r in results:
        if r.error:
            print(f"{r.name:<{w[0]}}  " + _("FAILED: {error}").format(error=r.error))
        elif r.skipped:
            print(f"{r.name:<{w[0]}}  " + _("skipped: {reason}").format(reason=bench.skip_reason(r.skipped)))
        else:
            cells = [(r.compile_seconds, f">{w[1]}.2f"), (r.ms_per_step, f">{w[2]}.3f"),
                     (r.samples_per_second, f">{w[3]},.0f"), (100 * r.fraction_of_peak, f">{w[4] - 1}.1f")]
            print(f"{r.name:<{w[0]}}" + "".join(format_number(value, spec) for value, spec in cells) + "%"
                  + format_number(r.peak_rss_mb, f">{w[5]}.0f"))


def print_ratios(done: dict[str, Any], rounds: list[list[Any]], count: int) -> dict[str, Any]:
    """scan-epoch against every other row, and with several rounds each row's range; the report's fields for them."""
    from jaxintro import bench

    report: dict[str, Any] = {}
    if "scan-epoch" in done:
        base = done["scan-epoch"].samples_per_second
        ratios = {name: base / r.samples_per_second for name, r in done.items() if name != "scan-epoch"}
        report["scan_speedup_over"] = ratios
        print(_("scan-epoch speed-up: {ratios}").format(
            ratios=", ".join(_("{ratio:.2f}x over {row}").format(ratio=v, row=k) for k, v in ratios.items())))
    if count > 1:
        report["spread"] = bench.range_over_rounds(rounds)
        print(_("Spread over {rounds} rounds (min-max):").format(rounds=count))
        for name, spread in report["spread"].items():
            ratios = ", ".join(_("{low:.2f}-{high:.2f}x over {row}").format(low=lo, high=hi, row=other)
                               for other, (lo, hi) in spread["speedup"].items())
            facts = dict(row=name, low=spread["ms_per_step"][0], high=spread["ms_per_step"][1], ratios=ratios)
            if ratios:
                print(_("  {row:<14} {low:.3f}-{high:.3f} ms/step; scan-epoch {ratios}").format(**facts))
            else:
                print(_("  {row:<14} {low:.3f}-{high:.3f} ms/step").format(**facts))
    return report


def print_members_rows(done: dict[str, Any]) -> None:
    """Rows that train several models: their throughput against scan-epoch's one model; then jit-step over nojit."""
    for r in (r for r in done.values() if r.models > 1):
        single = done.get("scan-epoch")
        where = ngettext("on {devices} device", "on {devices} devices", r.devices).format(devices=r.devices)
        facts = dict(row=r.name, rate=r.samples_per_second, models=r.models, per_model=r.samples_per_second / r.models,
                     where=where)
        if single:
            # 1.00x: running the models together gains nothing over training them one after the other.
            print(_("{row}: {rate:,.0f} samples/s for all {models} models {where}, {per_model:,.0f} per model; "
                    "{ratio:.2f}x the throughput of scan-epoch's one model").format(
                ratio=r.samples_per_second / single.samples_per_second, **facts))
        else:
            print(_("{row}: {rate:,.0f} samples/s for all {models} models {where}, {per_model:,.0f} per model").format(
                **facts))
    if "nojit" in done and "jit-step" in done:
        print(_("jit-step over nojit: {ratio:.1f}x (the lesson's 'JIT speedups of 100x' claim, measured here)").format(
            ratio=done["nojit"].ms_per_step / done["jit-step"].ms_per_step))


def end_to_end(data_args: list[str], plan: Any, dataset: Any, rounds: int) -> dict[str, Any]:
    """`--e2e`: whole 10-epoch training processes (the lesson's script, PyTorch, jaxintro train), best of `rounds`."""
    print("\n" + _("End to end: whole 10-epoch training processes (start to final accuracy)"), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.npz"
        plan.save(plan_path, x_test=dataset.x_test, y_test=dataset.y_test)
        every_round = timed.end_to_end(data_args, plan_path, rounds=rounds)
    best = timed.best_of_rounds(every_round)
    if rounds > 1:
        print(_("  best of {rounds} alternating rounds (the range over rounds in brackets)").format(rounds=rounds))
    for row in best:
        print(_("  {loop:<11} cache={cache:<5} {wall:7.1f}s wall [{low:.1f}-{high:.1f}]  peak RSS {rss:6.0f} MB  "
                "test acc {accuracy:.2f}%").format(
            loop=row["loop"], cache=row["cache"], wall=row["wall_seconds"], low=row["wall_range"][0],
            high=row["wall_range"][1], rss=row["peak_rss_mb"], accuracy=100 * row["test_accuracy"]))
    by_job = {(row["loop"], row["cache"]): row["wall_seconds"] for row in best}
    train_vs_lesson = {cache: by_job[("scan", cache)] / by_job[("lesson", "-")] for cache in ("cold", "warm")}
    print(_("  jaxintro train (scan) / the lesson's script: {cold:.2f}x the wall time with a cold compile "
            "cache, {warm:.2f}x warm").format(**train_vs_lesson))
    return {"end_to_end_rounds": every_round, "end_to_end": best, "train_vs_lesson": train_vs_lesson}


def members_end_to_end(data_args: list[str], seeds: int, rounds: int) -> dict[str, Any]:
    """`--e2e-seeds N`: one `train --seeds N` process against N sequential `train --seed k`, best of `rounds`."""
    print("\n" + _("End to end: one `train --seeds {n}` process against {n} sequential `train --seed k` processes, "
                   "10 epochs each").format(n=seeds), flush=True)
    pair = timed.members_end_to_end(data_args, seeds, rounds=rounds)
    if rounds > 1:
        print(_("  best of {rounds} alternating rounds (the range over rounds in brackets)").format(rounds=rounds))
    for label, side in ((_("one process"), pair["one_process"]), (_("sequential"), pair["sequential"])):
        print(_("  {label:<12} {wall:7.1f}s wall  peak RSS {rss:6.0f} MB  mean test acc {accuracy:.2f}%").format(
            label=label, wall=side["wall_seconds"], rss=side["peak_rss_mb"], accuracy=100 * side["test_accuracy"]))
    print(_("  one process / sequential: {wall:.2f}x the wall time [{low:.2f}-{high:.2f}], {rss:.2f}x the peak RSS "
            "(of the largest single process)").format(wall=pair["wall_ratio"], low=pair["wall_ratio_range"][0],
                                                      high=pair["wall_ratio_range"][1], rss=pair["peak_rss_ratio"]))
    return pair
