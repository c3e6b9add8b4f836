"""The `jaxintro` command line: parse flags into the one config, run, report. All I/O lives here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from jaxintro.bench import ROW_FUNCTIONS
from jaxintro.config import DATASETS, LOOPS, MODELS, OPTIMIZERS, PARALLEL, SCHEDULES, TrainConfig, parse_hidden
from jaxintro.errors import ConfigError, JaxintroError, TrainingDivergedError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), never a usage dump or a traceback."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_data_flags(p: argparse.ArgumentParser) -> None:
    """`--dataset --data-dir`, shared by every command that loads data."""
    p.add_argument("--dataset", default="auto", help=f"one of {', '.join(DATASETS)} (default: auto)")
    p.add_argument("--data-dir", default=None, help="folder with the four IDX files (or set JAXINTRO_DATA_DIR)")


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Every `TrainConfig` field as a flag, 1:1."""
    d = TrainConfig()
    add_data_flags(p)
    p.add_argument("--model", default=d.model, help=f"one of {', '.join(MODELS)} (default: {d.model})")
    p.add_argument("--hidden", default=",".join(map(str, d.hidden)), help="hidden widths (default: 256,128)")
    p.add_argument("--dropout", type=_number, default=d.dropout, help="dropout rate in [0, 1) (default: 0)")
    p.add_argument("--epochs", type=_positive_int, default=None, help=f"(default: {d.epochs})")
    p.add_argument("--batch-size", type=_positive_int, default=d.batch_size)
    p.add_argument("--optimizer", default=d.optimizer, help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--lr", type=_number, default=d.lr)
    p.add_argument("--weight-decay", type=_number, default=d.weight_decay, help="for adamw")
    p.add_argument("--schedule", default=d.schedule, help=f"one of {', '.join(SCHEDULES)}")
    p.add_argument("--warmup-steps", type=_positive_int, default=d.warmup_steps)
    p.add_argument("--clip-norm", type=_number, default=None, help="clip_by_global_norm before the optimizer")
    p.add_argument("--seed", type=_positive_int, default=d.seed)
    p.add_argument("--loop", default=d.loop, help=f"one of {', '.join(LOOPS)} (default: scan, one program per epoch)")
    p.add_argument("--devices", type=_positive_int, default=d.devices, help="data-parallel devices")
    p.add_argument("--parallel", default=d.parallel, help=f"one of {', '.join(PARALLEL)}")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Map parsed flags onto the config (1:1) and validate it."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {name: getattr(args, name) for name in fields if hasattr(args, name)}
    values["hidden"] = parse_hidden(args.hidden) if isinstance(args.hidden, str) else tuple(args.hidden)
    return TrainConfig(**values).validate()


def build_parser() -> ArgumentParser:
    """All subcommands and their flags."""
    parser = ArgumentParser(prog="jaxintro", description="The lesson 'Introduction to JAX', runnable.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    p = sub.add_parser("train", help="train the lesson's MLP (default: pure JAX + Optax on MNIST)")
    add_train_flags(p)
    p.add_argument("--run-dir", default=None, help="where to write this run (default: runs/<timestamp>)")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="multi-process training: address of process 0 (jax.distributed)")
    p.add_argument("--num-processes", type=_positive_int, default=1)
    p.add_argument("--process-id", type=_positive_int, default=0)
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue that run from its last checkpoint to --epochs in total (default: its own)")
    p.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    p.add_argument("--no-compile-cache", action="store_true", help="do not use JAX's persistent compile cache")

    p = sub.add_parser("bench", help="exercise 4: nojit vs jit-step vs scan-epoch vs PyTorch, side by side")
    add_data_flags(p)
    p.add_argument("--rows", default=",".join(ROW_FUNCTIONS), help="comma-separated rows to run")
    p.add_argument("--repeats", type=_positive_int, default=3, help="timed epochs per row (median)")
    p.add_argument("--nojit-steps", type=_positive_int, default=100)
    p.add_argument("--seed", type=_positive_int, default=0)
    p.add_argument("--e2e", action="store_true", help="also time whole 10-epoch train processes")
    p.add_argument("--out", default="runs/bench", help="folder for bench.png and bench.json")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("evaluate", help="test accuracy, per-class accuracy and a confusion matrix of a run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("predict", help="classify PNG/JPEG images with a trained run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("grads", help="exercise 2: per-example gradients and their norms")
    add_data_flags(p)
    p.add_argument("--run", default=None, metavar="RUN_DIR", help="a trained pure-JAX run (default: train briefly)")
    p.add_argument("--n", type=_positive_int, default=32, help="how many test images (default: 32)")
    p.add_argument("--seed", type=_positive_int, default=0)
    p.add_argument("--out", default="runs/grads")
    p.add_argument("--bench", action="store_true", help="time loop vs vmap vs fast norms (and torch.func)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("experiment", help="the lesson's experiments: dropout, models, clipping")
    p.add_argument("name", choices=["dropout", "models", "clipping"])
    add_train_flags(p)
    p.add_argument("--rate", type=_number, default=0.2, help="dropout rate for `dropout` (default: 0.2)")
    p.add_argument("--clip", type=_number, default=1.0, help="global-norm threshold for `clipping` (default: 1)")
    p.add_argument("--out", default=None, help="folder for plots (default: runs/experiment-<name>)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-compile-cache", action="store_true", help="do not use JAX's persistent compile cache")

    p = sub.add_parser("tour", help="every concept of the lesson, run and printed with real values")
    p.add_argument("--section", default=None, help="run one section (see --list)")
    p.add_argument("--list", action="store_true", help="list the sections")
    p.add_argument("--devices", type=_positive_int, default=4, help="CPU devices for the sharding section")

    p = sub.add_parser("data", help="list datasets, where each would load from, and whether it verifies")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", action="store_true")
    return parser


# ---------------------------------------------------------------- commands


def setup_jax(args: argparse.Namespace, devices: int = 1) -> dict[str, Any]:
    """Configure JAX before first use: CPU device count, multi-process runtime, persistent compile cache."""
    import jax

    if devices > 1:
        # Must happen before the backend starts; it only affects the CPU backend.
        try:
            jax.config.update("jax_num_cpu_devices", devices)
        except RuntimeError:  # JAX already started in this process (jaxintro used as a library)
            if len(jax.devices()) < devices:
                raise ConfigError(f"--devices {devices}: JAX already started with {len(jax.devices())} device(s) "
                                  "in this process; run jaxintro in a fresh process") from None
    if getattr(args, "coordinator", None):
        from jaxintro.parallel import initialize_distributed

        initialize_distributed(args.coordinator, args.num_processes, args.process_id)
    info: dict[str, Any] = {"compile_cache": None}
    if not getattr(args, "no_compile_cache", False):
        from jaxintro.runtime import enable_compile_cache

        info["compile_cache"] = str(enable_compile_cache())
    return info


class GracefulStop:
    """First Ctrl-C: finish the epoch, checkpoint, stop. Second Ctrl-C: stop at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> "GracefulStop":
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nCtrl-C: stopping after this epoch's checkpoint (press Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)


def resolve_train_config(args: argparse.Namespace) -> tuple[TrainConfig, Path, bool, dict[str, Any]]:
    """The run's config, folder, whether it resumes, and the JAX set-up (done here, before JAX starts)."""
    if args.resume:
        from jaxintro.checkpoint import load_config
        from jaxintro.runs import CONFIG_FILE, read_json

        run_dir = Path(args.resume)
        # JAX must learn the device count before Orbax starts it: read it from the plain config file.
        saved = run_dir / CONFIG_FILE
        jax_info = setup_jax(args, read_json(saved).get("devices", 1) if saved.is_file() else 1)
        config = load_config(run_dir)
        changes = {"epochs": args.epochs} if args.epochs is not None else {}
        if config.dataset == "auto":  # resume on the data the run used, even if `auto` would now pick another
            from jaxintro.checkpoint import read_meta

            changes["dataset"] = read_meta(run_dir).get("dataset", {}).get("name", "auto")
        if args.data_dir is not None:
            changes["data_dir"] = args.data_dir
        return dataclasses.replace(config, **changes).validate(), run_dir, True, jax_info
    if args.epochs is None:
        args.epochs = TrainConfig().epochs
    config = config_from_args(args)
    from jaxintro.runs import claim_run_dir

    if args.coordinator is None and (args.num_processes != 1 or args.process_id != 0):
        raise ConfigError("--num-processes and --process-id need --coordinator HOST:PORT")
    if args.coordinator is not None:
        from jaxintro.parallel import check_coordinator

        if args.run_dir is None:
            raise ConfigError("multi-process training needs --run-dir DIR, the same folder for every process")
        check_coordinator(args.coordinator, args.num_processes, args.process_id)
        if args.process_id != 0:  # process 0 claims the folder; the others share it
            return config, Path(args.run_dir), False, setup_jax(args, config.devices)
    # Refuse an unusable run folder before loading data or compiling anything.
    run_dir = claim_run_dir(args.run_dir)
    return config, run_dir, False, setup_jax(args, config.devices)


def cmd_train(args: argparse.Namespace) -> int:
    """`jaxintro train`."""
    config, run_dir, resuming, cache = resolve_train_config(args)
    import jax

    from jaxintro import runs
    from jaxintro.checkpoint import Checkpointer, abstract_state, restore
    from jaxintro.data import load_dataset
    from jaxintro.runtime import compile_cache_counts, peak_rss_mb
    from jaxintro.train import Trainer, fit

    dataset = load_dataset(config.dataset, config.data_dir)
    rows: list[dict[str, Any]] = []
    state = None
    if resuming:
        trainer = Trainer.create(config, dataset)
        state, meta = restore(run_dir, abstract_state(trainer.model, trainer.tx))
        rows = list(meta["metrics"])
        if state.epoch >= config.epochs:
            raise ConfigError(f"{run_dir} already has {state.epoch} epochs; pass --epochs N with N > {state.epoch}")
        print(f"Resuming {run_dir} from epoch {state.epoch} to {config.epochs}", flush=True)
    # With several processes, process 0 writes the run folder; every process takes part in checkpoints.
    primary = jax.process_index() == 0
    if primary:
        runs.write_json(run_dir / runs.CONFIG_FILE, {**config.to_json(), "resolved_dataset": dataset.name})
    checkpointer = Checkpointer(run_dir)

    def on_epoch(state, row) -> None:
        rows.append(row._asdict())
        # First the state, then the metrics that describe it.
        checkpointer.save(state, config, rows, {"name": dataset.name, "image_shape": list(dataset.image_shape),
                                                "classes": list(dataset.classes), "features": dataset.num_features})
        if primary:
            runs.write_metrics(run_dir, rows)

    print(f"Training {config.model} MLP {dataset.num_features}-{'-'.join(map(str, config.hidden))}-"
          f"{dataset.num_classes} on {dataset.name} ({len(dataset.x_train)} train / {len(dataset.x_test)} test, "
          f"from {dataset.source}); loop={config.loop}; run folder {run_dir}", flush=True)
    try:
        with GracefulStop() as stop:
            result = fit(config, dataset, state=state, on_epoch=on_epoch, progress=sys.stderr.isatty(),
                         should_stop=lambda: stop.requested)
    except TrainingDivergedError as exc:
        kept = f"the last good checkpoint is epoch {rows[-1]['epoch']} in {run_dir}" if rows else "no epoch finished"
        raise TrainingDivergedError(f"{exc}; {kept}") from None
    except Exception as exc:
        if jax.process_count() == 1 or isinstance(exc, JaxintroError):
            raise
        # In a multi-process run a collective (a gradient all-reduce, or Orbax's barrier) failing
        # means a peer died. Leave now: JAX's shutdown barrier would wait for it, then abort.
        kept = f"resume from epoch {rows[-1]['epoch']} with --resume {run_dir}" if rows else "no epoch finished"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        print(f"jaxintro train: error: process {jax.process_index()} lost its peers ({type(exc).__name__}: "
              f"{first}); {kept}", file=sys.stderr, flush=True)
        os._exit(1)
    finally:
        checkpointer.close()
    if primary:
        from jaxintro.plots import plot_curves  # matplotlib loads after training, off the memory peak

        plot_curves(rows, run_dir / "curves.png", title=f"{config.model} MLP on {dataset.name}")

    last = rows[-1]
    hits = compile_cache_counts()["hits"]
    summary = {
        "dataset": dataset.name,
        "model": config.model,
        "epochs": last["epoch"],
        "param_count": result.param_count,
        "test_accuracy": last["test_accuracy"],
        "train_accuracy": last["train_accuracy"],
        "final_loss": last["loss"],
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "samples_per_second": result.samples_per_second,
        "compile_cache": "off" if cache["compile_cache"] is None else ("hit" if hits else "miss"),
        "loop": config.loop,
        "seed": config.seed,
        "devices": len(jax.devices()) if jax.process_count() > 1 else config.devices,
        "processes": jax.process_count(),
        "peak_rss_mb": peak_rss_mb(),
        "run_dir": str(run_dir),
    }
    if primary:
        runs.write_json(run_dir / runs.RESULT_FILE, summary)
    if result.stopped_early:
        print(f"Stopped after epoch {last['epoch']}; continue with: jaxintro train --resume {run_dir}")
        if args.json:
            print(json.dumps(summary))
        return 130
    print(f"Done: test accuracy {100 * last['test_accuracy']:.2f}% after {last['epoch']} epochs, "
          f"{result.train_seconds:.1f}s training ({result.samples_per_second:,.0f} samples/s), "
          f"compile {result.compile_seconds:.2f}s (persistent cache: {summary['compile_cache']}). "
          f"Curves: {run_dir / 'curves.png'}")
    if args.json:
        print(json.dumps(summary))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """`jaxintro bench`."""
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ROW_FUNCTIONS))
    if unknown:
        raise ConfigError(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(tuple(ROW_FUNCTIONS))}")
    _check_dataset(args.dataset)
    out_dir = _writable_dir(args.out, "--out")
    import tempfile

    from jaxintro import bench
    from jaxintro.data import load_dataset
    from jaxintro.plots import plot_bars
    from jaxintro.runs import write_json

    dataset = load_dataset(args.dataset, args.data_dir)
    plan = bench.make_plan(dataset.x_train, dataset.y_train, seed=args.seed, repeats=args.repeats,
                           nojit_steps=args.nojit_steps)
    flops = bench.train_flops_per_step((dataset.num_features, 256, 128, dataset.num_classes), plan.batch)
    print(f"Benchmark on {dataset.name} ({len(dataset.x_train)} images, {len(plan.perm)} steps of {plan.batch}); "
          f"each row in its own process, median of {args.repeats} epochs after a warm-up.", flush=True)
    gflops_before = bench.measure_matmul_gflops()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.npz"
        plan.save(plan_path)
        for name in rows:
            print(f"  running {name} ...", flush=True)
            results.append(bench.run_row_subprocess(name, plan_path))
    # The machine's rate, measured before and after the rows; the higher one is the peak we compare with.
    matmul_gflops = max(gflops_before, bench.measure_matmul_gflops())
    for r in results:
        if not r.skipped:
            r.fraction_of_peak = flops / (r.ms_per_step / 1e3) / (matmul_gflops * 1e9)
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "batch_size": plan.batch,
        "matmul_gflops": matmul_gflops,
        "train_flops_per_step": flops,
        "rows": [{k: getattr(r, k) for k in ("name", "compile_seconds", "ms_per_step", "samples_per_second",
                                              "fraction_of_peak", "peak_rss_mb", "skipped")} for r in results],
    }
    print(f"\nfloat32 matmul rate (jitted 2048x2048): {matmul_gflops:.1f} GFLOP/s; "
          f"training FLOPs per step (forward + backward matmuls): {flops / 1e6:.1f} M")
    header = f"{'row':<14}{'compile s':>10}{'ms/step':>10}{'samples/s':>12}{'of peak':>9}{'peak RSS MB':>13}"
    print(header + "\n" + "-" * len(header))
    for r in results:
        if r.skipped:
            print(f"{r.name:<14}  skipped: {r.skipped}")
        else:
            print(f"{r.name:<14}{r.compile_seconds:>10.2f}{r.ms_per_step:>10.3f}{r.samples_per_second:>12,.0f}"
                  f"{100 * r.fraction_of_peak:>8.1f}%{r.peak_rss_mb:>13.0f}")
    done = {r.name: r for r in results if not r.skipped}
    if "scan-epoch" in done:
        base = done["scan-epoch"].samples_per_second
        ratios = {name: base / r.samples_per_second for name, r in done.items() if name != "scan-epoch"}
        report["scan_speedup_over"] = ratios
        print("scan-epoch speed-up: " + ", ".join(f"{v:.2f}x over {k}" for k, v in ratios.items()))
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
    names = [r.name for r in results if not r.skipped]
    plot_bars(names, [done[n].samples_per_second for n in names], out_dir / "bench.png",
              ylabel="samples / s (higher is better)",
              title=f"MLP training throughput, {dataset.name}, batch {plan.batch} (matmul peak "
                    f"{matmul_gflops:.0f} GFLOP/s)")
    write_json(out_dir / "bench.json", report)
    print(f"Chart: {out_dir / 'bench.png'}; numbers: {out_dir / 'bench.json'}")
    if args.json:
        print(json.dumps(report))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """`jaxintro evaluate RUN_DIR`."""
    from jaxintro.data import load_dataset
    from jaxintro.evaluate import evaluate_run, load_run
    from jaxintro.plots import plot_confusion

    run_dir = Path(args.run_dir)
    run = load_run(run_dir)
    dataset = load_dataset(run.dataset["name"], args.data_dir or run.config.data_dir)
    report = evaluate_run(run, dataset)
    png = plot_confusion(report["confusion"], dataset.classes, run_dir / "confusion.png",
                         title=f"{run.config.model} MLP, epoch {run.epoch}, {dataset.name} test set")
    print(f"{run_dir}: {run.config.model} MLP after {run.epoch} epochs on {dataset.name}")
    print(f"Test accuracy: {100 * report['test_accuracy']:.2f}% ({len(dataset.x_test)} images)")
    for name, acc in report["per_class_accuracy"].items():
        print(f"  class {name:<12} {100 * acc:6.2f}%")
    print(f"Confusion matrix: {png}")
    if args.json:
        print(json.dumps({**report, "confusion": report["confusion"].tolist(), "confusion_png": str(png)}))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """`jaxintro predict RUN_DIR IMAGE...`."""
    import numpy as np

    from jaxintro.evaluate import load_image, load_run, predict_proba

    run = load_run(Path(args.run_dir))
    shape = tuple(run.dataset["image_shape"])
    images = np.stack([load_image(Path(p), shape) for p in args.images])  # every file checked before any output
    probs = predict_proba(run, images)
    classes = run.dataset["classes"]
    results = []
    for path, p in zip(args.images, probs):
        top = np.argsort(p)[::-1][:3]
        results.append({"file": path, "digit": classes[int(top[0])],
                        "probabilities": {classes[int(i)]: float(p[i]) for i in range(len(p))},
                        "top3": [[classes[int(i)], float(p[i])] for i in top]})
        print(f"{path}: {classes[int(top[0])]}  (" + ", ".join(f"{classes[int(i)]}: {p[i]:.3f}" for i in top) + ")")
    if args.json:
        for r in results:
            print(json.dumps(r))
    return 0


def cmd_grads(args: argparse.Namespace) -> int:
    """`jaxintro grads`."""
    _check_dataset(args.dataset)
    out_dir = _writable_dir(args.out, "--out")
    from jaxintro.experiments import explain_grads, grads_benchmark

    report, lines, subject = explain_grads(args.run, args.dataset, args.data_dir, n=args.n, seed=args.seed,
                                           out=out_dir)
    for line in lines:
        print(line)
    if args.bench:
        timing = grads_benchmark(subject, n=max(args.n, 128))
        report["bench"] = timing
        print(f"\nPer-example gradient norms of {timing['n']} examples (median ms, warm, jitted):")
        for name in ("loop", "vmap", "fast", "torch-func-vmap"):
            if name in timing["ms"]:
                print(f"  {name:<16}{timing['ms'][name]:9.2f} ms   {timing['ms']['loop'] / timing['ms'][name]:7.1f}x "
                      "vs loop")
        if "torch_skipped" in timing:
            print(f"  torch-func-vmap skipped: {timing['torch_skipped']}")
    if args.json:
        print(json.dumps(report))
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    """`jaxintro experiment dropout|models|clipping`."""
    if args.epochs is None:
        args.epochs = TrainConfig().epochs
    config = config_from_args(args)
    if args.name == "dropout" and not 0.0 < args.rate < 1.0:
        raise ConfigError(f"--rate must be in (0, 1); got {args.rate}")
    if args.name == "clipping" and not (args.clip > 0 and args.clip < float("inf")):
        raise ConfigError(f"--clip must be a positive finite number; got {args.clip}")
    out_dir = _writable_dir(args.out or f"runs/experiment-{args.name}", "--out")
    setup_jax(args, config.devices)
    from jaxintro import experiments
    from jaxintro.data import load_dataset
    from jaxintro.runs import write_json

    dataset = load_dataset(config.dataset, config.data_dir)
    if args.name == "dropout":
        report = experiments.dropout_experiment(config, dataset, out_dir, rate=args.rate, log=print)
        print(f"\nTest accuracy without dropout: {100 * report['accuracy_without']:.2f}% "
              f"(train-test gap {100 * report['gap_without']:.2f} points)")
        print(f"Test accuracy with dropout {args.rate:g}: {100 * report['accuracy_with']:.2f}% "
              f"(train-test gap {100 * report['gap_with']:.2f} points)")
        print(f"Plot: {report['plot']}")
    elif args.name == "models":
        report = experiments.models_experiment(config, dataset, out_dir, log=print)
        print(f"\n{'model':<10}{'params':>10}{'test acc':>10}{'s/epoch':>10}{'compile s':>11}")
        for r in report["rows"]:
            print(f"{r['model']:<10}{r['param_count']:>10,}{100 * r['test_accuracy']:>9.2f}%"
                  f"{r['seconds_per_epoch']:>10.2f}{r['compile_seconds']:>11.2f}")
    else:
        report = experiments.clipping_experiment(config, dataset, out_dir, clip=args.clip, log=print)
        print(f"\nTest accuracy without clipping: {100 * report['accuracy_unclipped']:.2f}%")
        print(f"Test accuracy with clip_by_global_norm({args.clip:g}): {100 * report['accuracy_clipped']:.2f}%")
        print(f"Steps whose gradient norm exceeded {args.clip:g} (and were clipped): "
              f"{100 * report['clipped_fraction']:.1f}% overall, "
              f"{100 * report['clipped_fraction_first_epoch']:.1f}% in the first epoch")
        print(f"Plot: {report['plot']}")
    report["dataset"] = dataset.name
    write_json(out_dir / f"{args.name}.json", report)
    if args.json:
        print(json.dumps(report))
    return 0


def cmd_tour(args: argparse.Namespace) -> int:
    """`jaxintro tour`."""
    from jaxintro.tour import SECTIONS, run_tour

    if args.list:
        for name, fn in SECTIONS.items():
            print(f"{name:<14}{fn.__doc__}")
        return 0
    if args.section is not None and args.section not in SECTIONS:
        raise ConfigError(f"--section must be one of {', '.join(SECTIONS)}; got {args.section!r}")
    import jax

    try:  # the sharding section wants several devices; on a CPU they are created here
        jax.config.update("jax_num_cpu_devices", args.devices)
    except RuntimeError:
        pass  # JAX already started in this process: use the devices it has
    run_tour([args.section] if args.section else list(SECTIONS))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """`jaxintro data`."""
    from jaxintro.data import describe_sources

    rows = describe_sources(args.data_dir)
    if args.json:
        print(json.dumps(rows))
        return 0
    width = max(len(r["dataset"]) for r in rows)
    for r in rows:
        print(f"{r['dataset']:<{width}}  {r['source']}\n{'':<{width}}  {r['status']}")
    return 0


def _check_dataset(name: str) -> None:
    """Refuse an unknown dataset name before any work."""
    if name not in DATASETS:
        raise ConfigError(f"--dataset must be one of {', '.join(DATASETS)}; got {name!r}")


def _writable_dir(path: str, flag: str) -> Path:
    """Create `path` if needed and check that it is writable, else a ConfigError naming `flag`."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile_in(folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {folder} is not writable ({exc.strerror or exc}); choose another folder") from None
    return folder


def tempfile_in(folder: Path):
    """A throwaway file in `folder` (a writability probe)."""
    import tempfile

    return tempfile.TemporaryFile(dir=folder)


COMMANDS = {
    "train": cmd_train,
    "bench": cmd_bench,
    "evaluate": cmd_evaluate,
    "predict": cmd_predict,
    "grads": cmd_grads,
    "experiment": cmd_experiment,
    "tour": cmd_tour,
    "data": cmd_data,
}


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"\nWARNING: {message}\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jaxintro` console script."""
    warnings.formatwarning = _format_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"jaxintro {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except TrainingDivergedError as exc:
        print(f"jaxintro {args.command}: training diverged: {exc}", file=sys.stderr)
        return 1
    except JaxintroError as exc:
        print(f"jaxintro {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"jaxintro {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
