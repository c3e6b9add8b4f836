"""The `jaxintro` command line: flags, and one dispatch line per command.

Each command's work lives in `jaxintro.commands.<name>`, imported only when that command runs, so
`jaxintro --help` never starts JAX. Every user-facing failure is a `JaxintroError`: one line on
stderr, exit code 2 (1 for a diverged run); nothing else is caught here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import Sequence

from jaxintro import __version__
from jaxintro.config import BENCH_ROWS, DATASETS, LOOPS, MODELS, OPTIMIZERS, PARALLEL, SCHEDULES, TrainConfig
from jaxintro.errors import JaxintroError, TrainingDivergedError
from jaxintro.i18n import LANGUAGES, set_language

# Exit codes, documented in docs/reliability.md (130 and 143, a graceful stop, are in `jaxintro.signals`).
EXIT_ERROR = 2
EXIT_DIVERGED = 1


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show every flag's default, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), never a usage dump or a traceback."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def natural_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
    return value


def number(text: str) -> float:
    """A float (range checks happen in the config, which names the flag)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_data_flags(p: argparse.ArgumentParser) -> None:
    """`--dataset --data-dir`, shared by every command that loads data."""
    p.add_argument("--dataset", default="auto", choices=DATASETS, help="which dataset")
    p.add_argument("--data-dir", default=None,
                   help="folder with the four IDX files (or set JAXINTRO_DATA_DIR); an error if it holds none")


def add_train_flags(p: argparse.ArgumentParser, *, grid: bool = False, members: bool = True) -> None:
    """Every `TrainConfig` field as a flag, 1:1 (`grid`: `--lr` and `--weight-decay` take lists, for `sweep`)."""
    d = TrainConfig()
    add_data_flags(p)
    p.add_argument("--model", default=d.model, choices=MODELS, help="model style")
    p.add_argument("--hidden", default=",".join(map(str, d.hidden)), help="hidden widths, comma-separated")
    p.add_argument("--dropout", type=number, default=d.dropout, help="dropout rate in [0, 1)")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help=f"epochs in total (default: {d.epochs}; with --resume: the run's own)")
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, help="global batch size")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS, help="optimizer")
    if grid:  # parsed and checked by `jaxintro.config.parse_grid`, which names the flag in its errors
        p.add_argument("--lr", dest="lr_grid", default="1e-4,3e-4,1e-3,3e-3",
                       help="learning rates to compare, comma-separated (peak values, with a schedule)")
        p.add_argument("--weight-decay", dest="weight_decay_grid", default=None,
                       help=f"weight decays to compare, comma-separated, for adamw (default: {d.weight_decay})")
    else:
        p.add_argument("--lr", type=number, default=d.lr, help="learning rate (peak, with a schedule)")
        p.add_argument("--weight-decay", type=number, default=d.weight_decay, help="weight decay, for adamw")
    p.add_argument("--schedule", default=d.schedule, choices=SCHEDULES, help="learning-rate schedule")
    p.add_argument("--warmup-steps", type=natural_int, default=d.warmup_steps, help="warm-up steps of warmup-cosine")
    p.add_argument("--clip-norm", type=number, default=None, help="clip_by_global_norm before the optimizer (off)")
    p.add_argument("--seed", type=natural_int, default=d.seed, help="seed of the init, shuffles and dropout")
    if members:
        p.add_argument("--seeds", type=positive_int, default=d.seeds,
                       help="train this many models (seeds SEED, SEED+1, ...) together, in one vmapped program")
    p.add_argument("--loop", default=d.loop, choices=LOOPS,
                   help="scan: one compiled program per epoch; python: the lesson's per-batch loop")
    p.add_argument("--devices", type=positive_int, default=d.devices, help="data-parallel devices")
    p.add_argument("--parallel", default=d.parallel, choices=PARALLEL, help="how the batch is split over devices")


def build_parser() -> ArgumentParser:
    """All subcommands and their flags."""
    parser = ArgumentParser(prog="jaxintro", description="The lesson 'Introduction to JAX', runnable.")
    parser.add_argument("--version", action="version", version=f"jaxintro {__version__}")
    parser.add_argument("--lang", choices=LANGUAGES, default=None,
                        help="language of explanations (default: from LC_ALL, LC_MESSAGES or LANG)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    p = sub.add_parser("train", help="train the lesson's MLP (default: pure JAX + Optax on MNIST)")
    add_train_flags(p)
    p.add_argument("--run-dir", default=None, help="where to write this run (default: runs/<timestamp>)")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT|auto",
                   help="multi-process training: address of process 0, or `auto` to take it from SLURM, "
                        "Open MPI or a Kubernetes indexed Job (jax.distributed)")
    p.add_argument("--num-processes", type=positive_int, default=None, help="with --coordinator HOST:PORT (1)")
    p.add_argument("--process-id", type=natural_int, default=None, help="with --coordinator HOST:PORT (0)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue that run from its last intact checkpoint, to --epochs in total")
    p.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    p.add_argument("--no-compile-cache", action="store_true", help="do not use JAX's persistent compile cache")

    p = sub.add_parser("sweep", help="a grid of learning rates (and weight decays) x seeds, trained as one vmapped "
                                     "program; mean +- std test accuracy per setting")
    add_train_flags(p, grid=True)
    p.set_defaults(seeds=2)
    p.add_argument("--run-dir", default=None, help="where to write the sweep (default: runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    p.add_argument("--no-compile-cache", action="store_true", help="do not use JAX's persistent compile cache")

    p = sub.add_parser("profile", help="trace warm training steps with jax.profiler: op table, roofline, Perfetto trace")
    add_train_flags(p, members=False)
    p.add_argument("--steps", type=positive_int, default=20, help="warm training steps to trace")
    p.add_argument("--out", default="runs/profile", help="folder for the trace and profile.json")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("runs", help="list run folders (dataset, model, epochs, accuracy, finished or not)")
    p.add_argument("--root", default="runs", help="folder holding the runs")
    p.add_argument("--remove-unfinished", action="store_true",
                   help="delete run folders that hold no finished run (asks first unless --yes)")
    p.add_argument("--yes", action="store_true", help="with --remove-unfinished: do not ask")
    p.add_argument("--json", action="store_true", help="print the list as JSON")

    p = sub.add_parser("bench", help="exercise 4: nojit vs jit-step vs scan-epoch vs PyTorch, side by side")
    add_data_flags(p)
    p.add_argument("--rows", default=",".join(BENCH_ROWS), help="comma-separated rows to run")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed epochs per row (median)")
    p.add_argument("--rounds", type=positive_int, default=1,
                   help="run every row this many times, interleaved, and report the spread (min-max)")
    p.add_argument("--nojit-steps", type=positive_int, default=100, help="steps timed in the nojit row")
    p.add_argument("--seed", type=natural_int, default=0, help="seed of the shared batches")
    p.add_argument("--e2e", action="store_true", help="also time whole 10-epoch train processes")
    p.add_argument("--e2e-seeds", type=natural_int, default=0, metavar="N",
                   help="also time one 10-epoch `train --seeds N` process against N sequential ones (0: off)")
    p.add_argument("--out", default="runs/bench", help="folder for bench.png and bench.json")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("evaluate", help="test accuracy, per-class accuracy and a confusion matrix of a run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--data-dir", default=None, help="folder with the run's dataset (default: where it trained)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("predict", help="classify PNG/JPEG images with a trained run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--json", action="store_true", help="one JSON object per image")

    p = sub.add_parser("grads", help="exercise 2: per-example gradients and their norms")
    add_data_flags(p)
    p.add_argument("--run", default=None, metavar="RUN_DIR", help="a trained pure-JAX run (default: train briefly)")
    p.add_argument("--n", type=positive_int, default=32, help="how many test images")
    p.add_argument("--seed", type=natural_int, default=0, help="seed of the brief training")
    p.add_argument("--out", default="runs/grads", help="folder for the plots")
    p.add_argument("--bench", action="store_true", help="time loop vs vmap vs fast norms (and torch.func)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("experiment", help="the lesson's experiments: dropout, models, clipping")
    p.add_argument("name", choices=["dropout", "models", "clipping"])
    add_train_flags(p, members=False)
    p.add_argument("--rate", type=number, default=0.2, help="dropout rate for `dropout`")
    p.add_argument("--clip", type=number, default=1.0, help="global-norm threshold for `clipping`")
    p.add_argument("--out", default=None, help="folder for plots (default: runs/experiment-<name>)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-compile-cache", action="store_true", help="do not use JAX's persistent compile cache")

    p = sub.add_parser("tour", help="every concept of the lesson, run and printed with real values")
    p.add_argument("--section", default=None, help="run one section (see --list)")
    p.add_argument("--list", action="store_true", help="list the sections")
    p.add_argument("--devices", type=positive_int, default=4, help="CPU devices for the sharding section")

    p = sub.add_parser("data", help="list datasets, where each would load from, and whether it verifies")
    p.add_argument("--data-dir", default=None, help="a folder to look in first (or set JAXINTRO_DATA_DIR)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")

    p = sub.add_parser("serve", help="a local web page: draw a digit, see the prediction, saliency and mistakes")
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", default=None,
                   help="the run to serve (default: the newest finished run under runs/)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 opens it to the network")
    p.add_argument("--port", type=natural_int, default=8000, help="port (0: any free one)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--data-dir", default=None, help="folder with the run's dataset, for the mistakes panel")
    return parser


def given_flags(argv: Sequence[str] | None) -> frozenset[str]:
    """The destinations of the flags the user actually typed (a parse in which no flag has a default)."""
    parser = build_parser()
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        for action in current._actions:
            if action.option_strings:
                action.default = argparse.SUPPRESS
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return frozenset(vars(parser.parse_args(argv))) - {"command"}


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"\nWARNING: {message}\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jaxintro` console script."""
    warnings.formatwarning = _format_warning
    args = build_parser().parse_args(argv)
    args.given = given_flags(argv)  # e.g. `--resume` refuses flags it cannot honour, not their defaults
    set_language(args.lang)
    command = importlib.import_module(f"jaxintro.commands.{args.command}")
    try:
        return command.run(args)
    except TrainingDivergedError as exc:
        print(f"jaxintro {args.command}: training diverged: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except JaxintroError as exc:
        print(f"jaxintro {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"jaxintro {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`jaxintro evaluate RUN | head`): not an error of ours. Python would complain
        # again when flushing stdout at exit, so point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
