"""The `jaxintro` command line: flags, and one dispatch line per command.

Each command's work lives in `jaxintro.commands.<name>`, imported only when that command runs, so
`jaxintro --help` never starts JAX. Every user-facing failure is a `JaxintroError`: one line on
stderr, exit code 2 (1 for a diverged run, 74 for a write the machine refused); nothing else is
caught here. The language is chosen before the parser is built, so `--help` reads in it too.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import time
import warnings
from typing import Sequence

from jaxintro import __version__
from jaxintro.argtypes import fraction, natural_int, number, port_number, positive_int, seconds, significance
from jaxintro.config import (BENCH_ROWS, CPU_MEMBER_GROUP, DATASETS, DECAYING_OPTIMIZERS, LOOPS, MATMUL_PRECISIONS,
                             MODELS, OPTIMIZERS, PARALLEL, PROFILE_MAX_STEPS, SAVE_EVERY_SECONDS, SCHEDULES,
                             VALIDATION_SHARE, TrainConfig)
from jaxintro.errors import JaxintroError, TrainingDivergedError, device_unavailable, error_line
from jaxintro.faults import EXIT_WRITE_FAULT, WriteFault
from jaxintro.i18n import LANGUAGES, N_, EscapedStream, _, ngettext, set_language
from jaxintro.runs import stopped_line

# Exit codes, documented in docs/reliability.md (130 and 143, a graceful stop, are in `jaxintro.signals`;
# 74, a write the machine refused, in `jaxintro.faults`).
EXIT_ERROR = 2
EXIT_DIVERGED = 1
# argparse's own messages that a user can meet, marked here so `make messages` puts them in our catalog;
# `main` points argparse's `_` at ours, so a Spanish error reads Spanish from end to end.
ARGPARSE_MESSAGES = (
    N_("argument %(argument_name)s: %(message)s"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("invalid %(type)s value: %(value)r"),
    N_("unrecognized arguments: %s"),
    N_("the following arguments are required: %s"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("ignored explicit argument %r"),
    N_("not allowed with argument %s"),
    N_("one of the arguments %s is required"),
)
# A value that starts with "-" yet reads as numbers (`--lr -1,1e-3`) is a value, not an unknown flag: then
# the config's check names the flag and its range, as it does for `--lr=-1,1e-3`.
NEGATIVE_NUMBERS = re.compile(r"^-\.?\d[\d.eE+,-]*$")


def shows_default(action: argparse.Action) -> bool:
    """Whether a flag has a default worth showing: not None, a switch's False or "no such flag" (0 is shown)."""
    return not any(action.default is hidden for hidden in (None, False, argparse.SUPPRESS))


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show every flag's default, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not shows_default(action) or "default" in text or not action.option_strings:
            return text
        return text + " " + _("(default: %(default)s)")

    def add_usage(self, usage, actions, groups, prefix=None) -> None:
        super().add_usage(usage, actions, groups, _("usage: ") if prefix is None else prefix)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), never a usage dump or a traceback."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        # argparse's own words come from its own catalog (English only in most Pythons): ours name them.
        add_help = kwargs.pop("add_help", True)
        super().__init__(*args, add_help=False, **kwargs)
        self.add_help = add_help
        self._negative_number_matcher = NEGATIVE_NUMBERS
        self._positionals.title = _("positional arguments")
        self._optionals.title = _("options")
        if add_help:
            self.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS,
                              help=_("show this help message and exit"))

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, _("{prog}: error: {message} (see {prog} --help)").format(prog=self.prog, message=message)
                  + "\n")


def add_data_flags(p: argparse.ArgumentParser) -> None:
    """`--dataset --data-dir`, shared by every command that loads data."""
    p.add_argument("--dataset", default="auto", choices=DATASETS, help=_("which dataset"))
    p.add_argument("--data-dir", default=None,
                   help=_("folder with the four IDX files (or set JAXINTRO_DATA_DIR); an error if it holds none"))


def add_setting_flag(p: argparse.ArgumentParser) -> None:
    """`--setting`, for every command that uses a trained run (a sweep's run is used through one setting)."""
    p.add_argument("--setting", default=None, metavar="lr=LR[,wd=WD]",
                   help=_("a sweep's run: use this setting's models (default: the best setting's)"))


def add_train_flags(p: argparse.ArgumentParser, *, grid: bool = False, member_flags: bool = True,
                    one_device: bool = False) -> None:
    """Every `TrainConfig` field as a flag, 1:1 (`grid`: `--lr` and `--weight-decay` take lists, for `sweep`;
    `one_device`: a command that runs on one device, whose members do not spread)."""
    d = TrainConfig()
    add_data_flags(p)
    p.add_argument("--model", default=d.model, choices=MODELS, help=_("model style"))
    p.add_argument("--hidden", default=",".join(map(str, d.hidden)), help=_("hidden widths, comma-separated"))
    p.add_argument("--dropout", type=number, default=d.dropout, help=_("dropout rate in [0, 1)"))
    p.add_argument("--epochs", type=positive_int, default=None,
                   help=_("epochs in total (default: {epochs}; with --resume: the run's own)").format(epochs=d.epochs))
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, help=_("global batch size"))
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS, help=_("optimizer"))
    if grid:  # parsed and checked by `jaxintro.config.parse_grid`, which names the flag in its errors
        p.add_argument("--lr", dest="lr_grid", metavar="LR,LR,...", default="1e-4,3e-4,1e-3,3e-3",
                       help=_("learning rates to compare, comma-separated (peak values, with a schedule)"))
        p.add_argument("--weight-decay", dest="weight_decay_grid", metavar="WD,WD,...", default=None,
                       help=_("weight decays to compare, comma-separated, for {decaying} (default: {weight_decay})")
                       .format(decaying=DECAYING_OPTIMIZERS, weight_decay=d.weight_decay))
    else:
        p.add_argument("--lr", type=number, default=d.lr, help=_("learning rate (peak, with a schedule)"))
        p.add_argument("--weight-decay", type=number, default=d.weight_decay,
                       help=_("weight decay, for {decaying}").format(decaying=DECAYING_OPTIMIZERS))
    p.add_argument("--schedule", default=d.schedule, choices=SCHEDULES, help=_("learning-rate schedule"))
    p.add_argument("--warmup-steps", type=natural_int, default=d.warmup_steps, help=_("warm-up steps of warmup-cosine"))
    p.add_argument("--clip-norm", type=number, default=None, help=_("clip_by_global_norm before the optimizer (off)"))
    p.add_argument("--record-grad-norm", action="store_true",
                   help=_("keep every step's global gradient norm (before clipping): each epoch's largest is "
                          "max_grad_norm in metrics.jsonl (default off: it costs one more pass over the gradients "
                          "each step, none with --clip-norm)"))
    p.add_argument("--seed", type=natural_int, default=d.seed, help=_("seed of the init, shuffles and dropout"))
    if member_flags:
        p.add_argument("--seeds", type=positive_int, default=d.seeds,
                       help=_("train this many models (seeds SEED, SEED+1, ...) together, in one compiled program"))
        p.add_argument("--member-group", type=natural_int, default=d.member_group, metavar="N",
                       help=_("members one vmap trains at a time on each device, the groups one after another "
                              "in the same program "
                              "(default 0: all of them on an accelerator, {cpu} on a CPU; 1 runs each member's "
                              "single-run program, equal to --seed k bit for bit)").format(cpu=CPU_MEMBER_GROUP))
    p.add_argument("--loop", default=d.loop, choices=LOOPS,
                   help=_("scan: one compiled program per epoch; python: the lesson's per-batch loop"))
    p.add_argument("--devices", type=positive_int, default=d.devices,
                   help=_("data-parallel devices; with several members, the devices they spread over "
                          "(default: on a CPU one per core, as many as split them evenly; on an accelerator one)")
                   if member_flags and not one_device
                   else _("data-parallel devices"))
    p.add_argument("--parallel", default=d.parallel, choices=PARALLEL, help=_("how the batch is split over devices"))
    p.add_argument("--matmul-precision", default=d.matmul_precision, choices=MATMUL_PRECISIONS,
                   help=_("float32 matmuls: default (one bfloat16 pass on a TPU, float32 on a CPU), high, or highest "
                          "(float32 everywhere, slower on a TPU)"))


Commands = argparse._SubParsersAction  # what `add_subparsers` returns: one parser per command


def _add_train(sub: Commands) -> None:
    """`jaxintro train` and its flags."""
    p = sub.add_parser("train", help=_("train the lesson's MLP (default: pure JAX + Optax on MNIST)"))
    add_train_flags(p)
    p.add_argument("--validation", type=natural_int, default=TrainConfig().validation, metavar="N",
                   help=_("the last N training images, held out and scored after every epoch (Val Acc), to choose "
                          "with instead of the test set, which is then scored once, at the end (default: 0: train on "
                          "all of them and score the test set every epoch, as the lesson)"))
    p.add_argument("--run-dir", default=None, help=_("where to write this run (default: runs/<timestamp>)"))
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT|auto",
                   help=_("multi-process training: address of process 0, or `auto` to take it from SLURM, "
                          "Open MPI or a Kubernetes indexed Job (jax.distributed)"))
    p.add_argument("--num-processes", type=positive_int, default=None, help=_("with --coordinator HOST:PORT (1)"))
    p.add_argument("--process-id", type=natural_int, default=None, help=_("with --coordinator HOST:PORT (0)"))
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help=_("continue that run from its last intact checkpoint, to --epochs in total"))
    p.add_argument("--json", action="store_true", help=_("print one JSON summary as the last stdout line"))
    p.add_argument("--no-compile-cache", action="store_true", help=_("do not use JAX's persistent compile cache"))
    add_save_flag(p)


def add_save_flag(p: argparse.ArgumentParser) -> None:
    """`--save-every`, for every command that trains a run folder (`train`, `sweep`)."""
    p.add_argument("--save-every", type=seconds, default=SAVE_EVERY_SECONDS, metavar="SECONDS",
                   help=_("at most one checkpoint every SECONDS while training; the last epoch, a stop and the last "
                          "epoch before a divergence are always saved (default: {seconds:g}; 0: every epoch)").format(
                       seconds=SAVE_EVERY_SECONDS))


def _add_sweep(sub: Commands) -> None:
    """`jaxintro sweep` and its flags."""
    p = sub.add_parser("sweep", help=_("a grid of learning rates (and weight decays) x seeds, trained as one compiled "
                                       "program; mean +- std test accuracy per setting"))
    add_train_flags(p, grid=True)
    p.set_defaults(seeds=2)
    p.add_argument("--validation", type=positive_int, default=None, metavar="N",
                   help=_("the last N training images, held out: the sweep chooses its setting on them, never on the "
                          "test set, which it scores once, at the end (default: the last 1/{share} of them, 5,000 of "
                          "MNIST's)").format(
                       share=VALIDATION_SHARE))
    p.add_argument("--run-dir", default=None, help=_("where to write the sweep (default: runs/<timestamp>)"))
    p.add_argument("--json", action="store_true", help=_("print one JSON summary as the last stdout line"))
    p.add_argument("--no-compile-cache", action="store_true", help=_("do not use JAX's persistent compile cache"))
    add_save_flag(p)


def _add_profile(sub: Commands) -> None:
    """`jaxintro profile` and its flags."""
    p = sub.add_parser("profile",
                       help=_("trace warm training steps with jax.profiler: op table, roofline, Perfetto trace"))
    add_train_flags(p, one_device=True)
    p.add_argument("--steps", type=positive_int, default=20, help=_("warm training steps to trace (at most {most})").format(most=PROFILE_MAX_STEPS))
    p.add_argument("--out", default="runs/profile", help=_("folder for the trace and profile.json"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_runs(sub: Commands) -> None:
    """`jaxintro runs` and its flags."""
    p = sub.add_parser("runs", help=_("list run folders (dataset, model, epochs, accuracy, finished or not)"))
    p.add_argument("--root", default="runs", help=_("folder holding the runs"))
    p.add_argument("--remove-unfinished", action="store_true",
                   help=_("delete the run folders that hold no checkpoint and no live run (asks first unless --yes)"))
    p.add_argument("--yes", action="store_true", help=_("with --remove-unfinished: do not ask"))
    p.add_argument("--json", action="store_true", help=_("print the list as JSON"))


def _add_bench(sub: Commands) -> None:
    """`jaxintro bench` and its flags."""
    p = sub.add_parser("bench", help=_("exercise 4: nojit vs jit-step vs scan-epoch vs PyTorch, side by side"))
    add_data_flags(p)
    p.add_argument("--rows", default=",".join(BENCH_ROWS), help=_("comma-separated rows to run"))
    p.add_argument("--repeats", type=positive_int, default=3, help=_("timed epochs per row (median)"))
    p.add_argument("--rounds", type=positive_int, default=1,
                   help=_("run every row this many times, interleaved, and report the spread (min-max); "
                          "--e2e and --e2e-seeds: best of this many alternating rounds"))
    p.add_argument("--nojit-steps", type=positive_int, default=100, help=_("steps timed in the nojit row"))
    p.add_argument("--seed", type=natural_int, default=0, help=_("seed of the shared batches"))
    p.add_argument("--e2e", action="store_true", help=_("also time whole 10-epoch train processes"))
    p.add_argument("--e2e-seeds", type=natural_int, default=0, metavar="N",
                   help=_("also time one 10-epoch `train --seeds N` process against N sequential ones (0: off)"))
    p.add_argument("--out", default="runs/bench", help=_("folder for bench.png and bench.json"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_speedrun(sub: Commands) -> None:
    """`jaxintro speedrun` and its flags (a recipe flag replaces that part of the track's recipe)."""
    p = sub.add_parser("speedrun", help=_("the lesson's MLP to 98%% as fast as possible: time to accuracy, with "
                                          "the evidence, side by side with PyTorch and the lesson's recipe"))
    add_data_flags(p)
    p.add_argument("--track", choices=("time", "accuracy"), default="time",
                   help=_("time: the fastest recipe to the target; accuracy: the best mean within 60 s of training"))
    p.add_argument("--seeds", type=positive_int, default=8, help=_("models trained together for the evidence"))
    p.add_argument("--first-seed", type=natural_int, default=100,
                   help=_("the evidence's first seed: the recipes were tuned on seeds 0-7, so the evidence is other seeds"))
    p.add_argument("--target", type=fraction, default=0.98, help=_("the mean test accuracy to reach (a fraction)"))
    p.add_argument("--alpha", type=significance, default=0.01, help=_("the one-sided t-test's level"))
    p.add_argument("--rounds", type=positive_int, default=3, help=_("timed runs of each row, in turns (median)"))
    p.add_argument("--lesson-epochs", type=positive_int, default=10, help=_("epochs of the lesson's rows"))
    p.add_argument("--ablate", action="store_true", help=_("also take each trick away in turn"))
    p.add_argument("--tune", action="store_true",
                   help=_("how the track's recipe was chosen: every recipe of its grid on seeds 0-7, trained without "
                          "the last --validation training images and judged on them (not on the test set)"))
    p.add_argument("--validation", type=positive_int, default=None, metavar="N",
                   help=_("with --tune: the training images held out (default: the last 1/{share})").format(
                       share=VALIDATION_SHARE))
    p.add_argument("--epochs", type=positive_int, default=None, help=_("the recipe's epochs"))
    p.add_argument("--batch-size", type=positive_int, default=None, help=_("the recipe's batch size"))
    p.add_argument("--lr", dest="peak_lr", type=float, default=None, help=_("the recipe's peak learning rate"))
    p.add_argument("--schedule", choices=("warmup-cosine", "constant"), default=None, help=_("the recipe's schedule"))
    p.add_argument("--warmup-steps", type=natural_int, default=None, help=_("the recipe's warm-up steps"))
    p.add_argument("--label-smoothing", type=float, default=None, help=_("the recipe's label smoothing"))
    p.add_argument("--average", type=float, default=None,
                   help=_("the recipe's weight average decay per step (0: off)"))
    p.add_argument("--standardize", action=argparse.BooleanOptionalAction, default=None,
                   help=_("standardise the inputs with the training set's mean and spread"))
    p.add_argument("--program", choices=("run", "epoch", "step"), default=None,
                   help=_("run: the whole run as one program; epoch: one per epoch; step: the lesson's loop"))
    p.add_argument("--out", default="runs/speedrun", help=_("folder for speedrun.json"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_evaluate(sub: Commands) -> None:
    """`jaxintro evaluate` and its flags."""
    p = sub.add_parser("evaluate", help=_("test accuracy, per-class accuracy and a confusion matrix of a run"))
    p.add_argument("run_dir", metavar="RUN_DIR", help=_("a run folder of `jaxintro train` (e.g. runs/20261207-101659)"))
    add_setting_flag(p)
    p.add_argument("--data-dir", default=None, help=_("folder with the run's dataset (default: where it trained)"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_predict(sub: Commands) -> None:
    """`jaxintro predict` and its flags."""
    p = sub.add_parser("predict", help=_("classify PNG/JPEG images with a trained run"))
    p.add_argument("run_dir", metavar="RUN_DIR", help=_("a run folder of `jaxintro train` (e.g. runs/20261207-101659)"))
    p.add_argument("images", nargs="+", metavar="IMAGE", help=_("PNG or JPEG files of one digit each (a photo, a "
                                                                "drawing; dark ink on light paper or the reverse)"))
    add_setting_flag(p)
    p.add_argument("--json", action="store_true", help=_("one JSON object per image"))


def _add_grads(sub: Commands) -> None:
    """`jaxintro grads` and its flags."""
    p = sub.add_parser("grads", help=_("exercise 2: per-example gradients and their norms"))
    add_data_flags(p)
    p.add_argument("--run", default=None, metavar="RUN_DIR", help=_("a trained pure-JAX run (default: train briefly)"))
    add_setting_flag(p)
    p.add_argument("--n", type=positive_int, default=32, help=_("how many test images"))
    p.add_argument("--seed", type=natural_int, default=0, help=_("seed of the brief training"))
    p.add_argument("--out", default="runs/grads", help=_("folder for the plots"))
    p.add_argument("--bench", action="store_true", help=_("time loop vs vmap vs fast norms (and torch.func)"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_experiment(sub: Commands) -> None:
    """`jaxintro experiment` and its flags."""
    p = sub.add_parser("experiment", help=_("the lesson's experiments: dropout, models, clipping"))
    p.add_argument("name", choices=["dropout", "models", "clipping"])
    add_train_flags(p, member_flags=False)
    p.add_argument("--rate", type=number, default=0.2, help=_("dropout rate for `dropout`"))
    p.add_argument("--clip", type=number, default=1.0, help=_("global-norm threshold for `clipping`"))
    p.add_argument("--out", default=None, help=_("folder for plots (default: runs/experiment-<name>)"))
    p.add_argument("--json", action="store_true", help=_("print the report as JSON"))
    p.add_argument("--no-compile-cache", action="store_true", help=_("do not use JAX's persistent compile cache"))


def _add_tour(sub: Commands) -> None:
    """`jaxintro tour` and its flags."""
    p = sub.add_parser("tour", help=_("every concept of the lesson, run and printed with real values"))
    p.add_argument("--section", default=None, help=_("run one section (see --list)"))
    p.add_argument("--list", action="store_true", help=_("list the sections"))
    p.add_argument("--devices", type=positive_int, default=4, help=_("CPU devices for the sharding section"))


def _add_data(sub: Commands) -> None:
    """`jaxintro data` and its flags."""
    p = sub.add_parser("data", help=_("list datasets, where each would load from, and whether it verifies"))
    p.add_argument("--data-dir", default=None, help=_("a folder to look in first (or set JAXINTRO_DATA_DIR)"))
    p.add_argument("--json", action="store_true", help=_("print the list as JSON"))


def _add_serve(sub: Commands) -> None:
    """`jaxintro serve` and its flags."""
    p = sub.add_parser("serve", help=_("a local web page: draw a digit, see the prediction, saliency and mistakes"))
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", default=None,
                   help=_("the run to serve (default: the newest finished run under runs/)"))
    p.add_argument("--host", default="127.0.0.1", help=_("address to listen on; 0.0.0.0 opens it to the network"))
    p.add_argument("--port", type=port_number, default=8000, help=_("port (0: any free one)"))
    p.add_argument("--open", action="store_true", help=_("open the page in the default browser"))
    p.add_argument("--data-dir", default=None, help=_("folder with the run's dataset, for the mistakes panel"))
    add_setting_flag(p)


def _add_exercises(sub: Commands) -> None:
    """`jaxintro exercises` and its flags."""
    p = sub.add_parser("exercises", help=_("write the lesson's code yourself and have it checked: init, list, check, "
                                           "hint, reset, solution (default: list)"))
    actions = p.add_subparsers(dest="action", metavar=_("ACTION"), parser_class=ArgumentParser)
    folder_help = _("the exercises folder (default: ./ejercicios in Spanish, else ./exercises)")
    q = actions.add_parser("init", help=_("write one starter file per exercise; existing files are kept"))
    q.add_argument("folder", nargs="?", default=None, metavar="DIR", help=folder_help)
    q = actions.add_parser("list", help=_("every exercise with its state, and what to do next"))
    q.add_argument("--json", action="store_true", help=_("print the list as JSON"))
    q = actions.add_parser("check", help=_("check exercise N (default: the first that does not pass); exit code 1 "
                                           "when it fails"))
    q.add_argument("number", nargs="?", type=positive_int, default=None, metavar="N")
    q.add_argument("--watch", action="store_true", help=_("check again each time an exercise file is saved"))
    q.add_argument("--timeout", type=number, default=60.0, help=_("seconds a check may take"))
    q.add_argument("--json", action="store_true", help=_("print the verdict as JSON"))
    q = actions.add_parser("hint", help=_("one more hint for exercise N each time (default: the first that does "
                                          "not pass)"))
    q.add_argument("number", nargs="?", type=positive_int, default=None, metavar="N")
    q = actions.add_parser("reset", help=_("a fresh starter file for exercise N; yours is kept as a backup"))
    q.add_argument("number", type=positive_int, metavar="N")
    q = actions.add_parser("solution", help=_("our solution of exercise N, once it passes"))
    q.add_argument("number", type=positive_int, metavar="N")
    q.add_argument("--force", action="store_true", help=_("show it before it passes (asks first)"))
    for q in actions.choices.values():
        q.add_argument("--dir", default=None, help=folder_help)
        q.add_argument("--lang", choices=LANGUAGES, default=argparse.SUPPRESS,
                       help=_("language of explanations (default: from LC_ALL, LC_MESSAGES or LANG)"))


def build_parser() -> ArgumentParser:
    """All subcommands and their flags."""
    parser = ArgumentParser(prog="jaxintro", description=_("The lesson 'Introduction to JAX', runnable."))
    parser.add_argument("--version", action="version", version=f"jaxintro {__version__}",
                        help=_("show program's version number and exit"))
    parser.add_argument("--lang", choices=LANGUAGES, default=None,
                        help=_("language of explanations (default: from LC_ALL, LC_MESSAGES or LANG)"))
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    for add_command in (_add_train, _add_sweep, _add_profile, _add_runs, _add_bench, _add_speedrun, _add_evaluate,
                        _add_predict, _add_grads, _add_experiment, _add_tour, _add_data, _add_serve, _add_exercises):
        add_command(sub)  # in this order: `jaxintro --help` lists them so
    for command in sub.choices.values():  # `jaxintro tour --lang es` as well as `jaxintro --lang es tour`
        command.add_argument("--lang", choices=LANGUAGES, default=argparse.SUPPRESS,
                             help=_("language of explanations (default: from LC_ALL, LC_MESSAGES or LANG)"))
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
    return "\n" + _("WARNING: {message}").format(message=message) + "\n\n"


def language_flag(argv: Sequence[str] | None) -> str | None:
    """The `--lang` of `argv` when it is a known language, else None (the locale decides).

    Read before the real parser exists, since that parser's help texts are translated as it is built;
    a bad or missing value is left for the real parser to refuse, in the locale's language.
    """

    class Quiet(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise ValueError(message)

    pre = Quiet(add_help=False)
    pre.add_argument("--lang")
    try:
        known, _rest = pre.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    except ValueError:
        return None
    return known.lang if known.lang in LANGUAGES else None


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but a flag no command knows is refused by the command's own parser, which names
    its closest flags (`--data_dir`: did you mean --data-dir?) and its own --help (Python 3.11's argparse does not)."""
    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    command = parser
    while (choices := next((a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None)) \
            and getattr(args, choices.dest, None) in choices.choices:
        command = choices.choices[getattr(args, choices.dest)]
    flags = [flag for action in command._actions for flag in action.option_strings if flag.startswith("--")]
    typed = next((word.split("=")[0] for word in unknown if word.startswith("-")), "")
    close = difflib.get_close_matches(typed.replace("_", "-").lower(), flags, n=2, cutoff=0.6) if typed else []
    message = _("unrecognized arguments: %s") % " ".join(unknown)
    if close:
        message += _("; did you mean {flags}?").format(flags=_(" or ").join(close))
    command.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jaxintro` console script."""
    started = time.perf_counter()
    warnings.formatwarning = _format_warning
    set_language(language_flag(argv))  # first: the parser's help and errors are in this language
    argparse._, argparse.ngettext = _, ngettext  # argparse's own words too (ARGPARSE_MESSAGES)
    parser = build_parser()
    args = parse_arguments(parser, argv)
    if args.command is None:  # bare `jaxintro`: the commands, rather than "a command is required"
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    args.given = given_flags(argv)  # e.g. `--resume` refuses flags it cannot honour, not their defaults
    args.started = started  # `train --json` reports the time from here on, phase by phase
    command = importlib.import_module(f"jaxintro.commands.{args.command}")
    # Every word a command prints goes through one escaping function: a run folder from someone else holds
    # names and values that, printed raw, could drive the learner's terminal (its title, its clipboard).
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapedStream(sys.stdout), EscapedStream(sys.stderr)
    try:
        return command.run(args)
    except TrainingDivergedError as exc:
        print(_("jaxintro {command}: training diverged: {error}").format(command=args.command, error=exc),
              file=sys.stderr)
        return EXIT_DIVERGED
    except WriteFault as exc:  # the machine refused a write: what is on disk, and how to go on
        print(_("jaxintro {command}: write failed: {error}").format(command=args.command, error=stopped_line(exc)),
              file=sys.stderr)
        return EXIT_WRITE_FAULT
    except JaxintroError as exc:
        print(error_line(args.command, exc), file=sys.stderr)
        return EXIT_ERROR
    except RuntimeError as exc:
        if (line := device_unavailable(exc)) is None:
            raise
        print(error_line(args.command, line), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(_("jaxintro {command}: interrupted").format(command=args.command), file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`jaxintro evaluate RUN | head`): not an error of ours. Python would complain
        # again when flushing stdout at exit, so point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        sys.stdout, sys.stderr = streams


def run() -> None:
    """The `jaxintro` program (console script and `python -m jaxintro.cli`): `main`, then exit with its code."""
    code = main()
    if code == EXIT_WRITE_FAULT:
        # The machine refused a write and what the run keeps is on disk. A library's thread (Orbax's writers)
        # or exit handler may still wait on that disk, and the interpreter's exit would wait for it: leave now.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a reader that left (a closed pipe) must not keep the process here
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
