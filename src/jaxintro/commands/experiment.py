"""`jaxintro experiment dropout|models|clipping`: the lesson's experiments, trained and plotted."""

from __future__ import annotations

import argparse

from jaxintro.config import config_from_flags
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError
from jaxintro.i18n import Code, _, format_number
from jaxintro.jsonio import json_text
from jaxintro.runs import writable_dir, write_json


def run(args: argparse.Namespace) -> int:
    """Validate every flag, then train the experiment's runs and print its summary."""
    config = config_from_flags(args)
    if args.name == "dropout" and not 0.0 < args.rate < 1.0:
        raise ConfigError(_("--rate must be in (0, 1); got {rate}").format(rate=args.rate))
    if args.name == "clipping" and not (args.clip > 0 and args.clip < float("inf")):
        raise ConfigError(_("--clip must be a positive finite number; got {clip}").format(clip=args.clip))
    out_dir = writable_dir(args.out or f"runs/experiment-{args.name}", "--out")
    from jaxintro.runtime import configure_jax

    configure_jax(devices=config.devices, compile_cache=not args.no_compile_cache,
                  matmul_precision=config.matmul_precision)
    from jaxintro import experiments

    dataset = load_dataset(config.dataset, config.data_dir)
    if args.name == "dropout":
        report = experiments.dropout_experiment(config, dataset, out_dir, rate=args.rate, log=print)
        print("\n" + _("Test accuracy without dropout: {accuracy:.2f}% (train-test gap {gap:.2f} points)").format(
            accuracy=100 * report["accuracy_without"], gap=100 * report["gap_without"]))
        print(_("Test accuracy with dropout {rate:g}: {accuracy:.2f}% (train-test gap {gap:.2f} points)").format(
            rate=args.rate, accuracy=100 * report["accuracy_with"], gap=100 * report["gap_with"]))
        print(_("Plot: {path}").format(path=report["plot"]))
    elif args.name == "models":
        report = experiments.models_experiment(config, dataset, out_dir, log=print)
        # Column headings, each translated alone (outside the f-string, where extraction finds them) to keep the widths.
        heads = [_("model"), _("params"), _("test acc"), _("s/epoch"), _("compile s")]
        # A longer translation widens its column, two spaces apart at least, so headings never run together.
        widths = [max(width, len(head) + 2) for head, width in zip(heads[1:], (10, 10, 10, 11))]
        print("\n" + f"{heads[0]:<10}" + "".join(f"{h:>{w}}" for h, w in zip(heads[1:], widths)))
        for r in report["rows"]:
            cells = zip((r["param_count"], r["test_accuracy"], r["seconds_per_epoch"], r["compile_seconds"]), widths,
                        (",", ".2%", ".2f", ".2f"))
            print(f"{r['model']:<10}" + "".join(format_number(value, f">{w}{spec}") for value, w, spec in cells))
    else:
        report = experiments.clipping_experiment(config, dataset, out_dir, clip=args.clip, log=print)
        print("\n" + _("Test accuracy without clipping: {accuracy:.2f}%").format(
            accuracy=100 * report["accuracy_unclipped"]))
        print(_("Test accuracy with clip_by_global_norm({clip:g}): {accuracy:.2f}%").format(
            clip=Code(args.clip), accuracy=100 * report["accuracy_clipped"]))
        # "%" is never followed by a letter here: gettext tools would read "% o" as a %-format placeholder.
        print(_("Steps whose gradient norm exceeded {clip:g} (and were clipped): overall {overall:.1f}%, "
                "in the first epoch {first:.1f}%").format(clip=args.clip, overall=100 * report["clipped_fraction"],
                                                          first=100 * report["clipped_fraction_first_epoch"]))
        print(_("Plot: {path}").format(path=report["plot"]))
    report["dataset"] = dataset.name
    write_json(out_dir / f"{args.name}.json", report)
    if args.json:
        print(json_text(report))
    return 0
