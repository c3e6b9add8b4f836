"""`jaxintro bench`: exercise 4, every way to train the MLP side by side, each row in its own process."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from jaxintro.config import BENCH_ROWS
from jaxintro.errors import ConfigError, JaxintroError


def run(args: argparse.Namespace) -> int:
    """Run the rows, print the table and ratios, write bench.json and bench.png; a crashed row is an error."""
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(BENCH_ROWS))
    if unknown or not rows:
        raise ConfigError(f"--rows: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(BENCH_ROWS)}")
    from jaxintro.runs import writable_dir

    out_dir = writable_dir(args.out, "--out")
    from jaxintro import bench
    from jaxintro.data import load_dataset
    from jaxintro.plots import plot_bars
    from jaxintro.runs import write_json

    dataset = load_dataset(args.dataset, args.data_dir)
    plan = bench.make_plan(dataset.x_train, dataset.y_train, seed=args.seed, repeats=args.repeats,
                           nojit_steps=args.nojit_steps)
    flops = bench.train_flops_per_step((dataset.num_features, 256, 128, dataset.num_classes), plan.batch)
    print(f"Benchmark on {dataset.name} ({len(dataset.x_train)} images, {len(plan.perm)} steps of {plan.batch}); "
          f"each row in its own process, median of {args.repeats} epochs after a warm-up"
          + (f"; {args.rounds} rounds of every row, interleaved." if args.rounds > 1 else "."), flush=True)
    gflops_before = bench.measure_matmul_gflops()
    rounds: list[list[Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.npz"
        plan.save(plan_path)
        # Rows alternate round by round, so a slow minute of the machine falls on every row alike.
        for round_index in range(args.rounds):
            rounds.append([])
            for name in rows:
                label = f" (round {round_index + 1} of {args.rounds})" if args.rounds > 1 else ""
                print(f"  running {name}{label} ...", flush=True)
                rounds[-1].append(bench.run_row_subprocess(name, plan_path))
    results = [bench.median_round([r[i] for r in rounds]) for i in range(len(rows))]
    # The machine's rate, measured before and after the rows; the higher one is the peak we compare with.
    matmul_gflops = max(gflops_before, bench.measure_matmul_gflops())
    done = {r.name: r for r in results if not (r.skipped or r.error)}
    for r in done.values():
        r.fraction_of_peak = r.models * flops / (r.ms_per_step / 1e3) / (matmul_gflops * 1e9)
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "batch_size": plan.batch,
        "matmul_gflops": matmul_gflops,
        "train_flops_per_step": flops,
        # A row that did not run has no numbers: null in the JSON, not NaN (which JSON does not have).
        "rows": [{k: bench.finite_or_none(getattr(r, k)) for k in ("name", "compile_seconds", "ms_per_step",
                                                               "samples_per_second", "fraction_of_peak",
                                                               "peak_rss_mb", "models", "skipped", "error")}
                 for r in results],
    }
    print(f"\nfloat32 matmul rate (jitted 2048x2048): {matmul_gflops:.1f} GFLOP/s; "
          f"training FLOPs per step (forward + backward matmuls): {flops / 1e6:.1f} M")
    header = f"{'row':<14}{'compile s':>10}{'ms/step':>10}{'samples/s':>12}{'of peak':>9}{'peak RSS MB':>13}"
    print(header + "\n" + "-" * len(header))
    for r in results:
        if r.error:
            print(f"{r.name:<14}  FAILED: {r.error}")
        elif r.skipped:
            print(f"{r.name:<14}  skipped: {r.skipped}")
        else:
            print(f"{r.name:<14}{r.compile_seconds:>10.2f}{r.ms_per_step:>10.3f}{r.samples_per_second:>12,.0f}"
                  f"{100 * r.fraction_of_peak:>8.1f}%{r.peak_rss_mb:>13.0f}")
    if "scan-epoch" in done:
        base = done["scan-epoch"].samples_per_second
        ratios = {name: base / r.samples_per_second for name, r in done.items() if name != "scan-epoch"}
        report["scan_speedup_over"] = ratios
        print("scan-epoch speed-up: " + ", ".join(f"{v:.2f}x over {k}" for k, v in ratios.items()))
    if args.rounds > 1:
        report["spread"] = bench.spread_over_rounds(rounds)
        print(f"Spread over {args.rounds} rounds (min-max):")
        for name, spread in report["spread"].items():
            ratios = ", ".join(f"{lo:.2f}-{hi:.2f}x over {other}" for other, (lo, hi) in spread["speedup"].items())
            print(f"  {name:<14} {spread['ms_per_step'][0]:.3f}-{spread['ms_per_step'][1]:.3f} ms/step"
                  + (f"; scan-epoch {ratios}" if ratios else ""))
    several = [r for r in done.values() if r.models > 1]
    for r in several:
        single = done.get("scan-epoch")
        # 1.00x: batching the models gains nothing over training them one after the other in one process.
        versus = (f"; {r.samples_per_second / single.samples_per_second:.2f}x the throughput of scan-epoch's one "
                  "model" if single else "")
        print(f"{r.name}: {r.samples_per_second:,.0f} samples/s for all {r.models} models, "
              f"{r.samples_per_second / r.models:,.0f} per model{versus}")
    if "nojit" in done and "jit-step" in done:
        print(f"jit-step over nojit: {done['nojit'].ms_per_step / done['jit-step'].ms_per_step:.1f}x "
              "(the lesson's 'JIT speedups of 100x' claim, measured here)")
    if args.e2e:
        data_args = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
        print("\nEnd to end: whole 10-epoch training processes (start to final accuracy)", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            plan_path = Path(tmp) / "plan.npz"
            plan.save(plan_path, x_test=dataset.x_test, y_test=dataset.y_test)
            report["end_to_end"] = bench.end_to_end(data_args, plan_path)
        for row in report["end_to_end"]:
            print(f"  {row['loop']:<11} cache={row['cache']:<5} {row['wall_seconds']:7.1f}s wall  "
                  f"peak RSS {row['peak_rss_mb']:6.0f} MB  test acc {100 * row['test_accuracy']:.2f}%")
    if args.e2e_seeds:
        data_args = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
        print(f"\nEnd to end: one `train --seeds {args.e2e_seeds}` process against {args.e2e_seeds} sequential "
              "`train --seed k` processes, 10 epochs each", flush=True)
        pair = report["members_end_to_end"] = bench.members_end_to_end(data_args, args.e2e_seeds)
        for label, side in (("one process", pair["one_process"]), ("sequential", pair["sequential"])):
            print(f"  {label:<12} {side['wall_seconds']:7.1f}s wall  peak RSS {side['peak_rss_mb']:6.0f} MB  "
                  f"mean test acc {100 * side['test_accuracy']:.2f}%")
        print(f"  one process / sequential: {pair['wall_ratio']:.2f}x the wall time, "
              f"{pair['peak_rss_ratio']:.2f}x the peak RSS (of the largest single process)")
    names = list(done)
    if names:
        plot_bars(names, [done[n].samples_per_second for n in names], out_dir / "bench.png",
                  ylabel="samples / s (higher is better)",
                  title=f"MLP training throughput, {dataset.name}, batch {plan.batch} (matmul peak "
                        f"{matmul_gflops:.0f} GFLOP/s)")
    write_json(out_dir / "bench.json", report)
    print(f"Chart: {out_dir / 'bench.png'}; numbers: {out_dir / 'bench.json'}")
    if args.json:
        print(json.dumps(report))
    failed = [r for r in results if r.error]
    if failed:
        raise JaxintroError(f"{len(failed)} row(s) crashed ({', '.join(r.name for r in failed)}); the first: "
                            f"{failed[0].error}; the other rows are in {out_dir / 'bench.json'}")
    return 0

