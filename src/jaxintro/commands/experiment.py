"""`jaxintro experiment dropout|models|clipping`: the lesson's experiments, trained and plotted."""

from __future__ import annotations

import argparse
import json

from jaxintro.errors import ConfigError


def run(args: argparse.Namespace) -> int:
    """Validate every flag, then train the experiment's runs and print its summary."""
    from jaxintro.commands.train import config_from_args
    from jaxintro.runs import writable_dir

    config = config_from_args(args)
    if args.name == "dropout" and not 0.0 < args.rate < 1.0:
        raise ConfigError(f"--rate must be in (0, 1); got {args.rate}")
    if args.name == "clipping" and not (args.clip > 0 and args.clip < float("inf")):
        raise ConfigError(f"--clip must be a positive finite number; got {args.clip}")
    out_dir = writable_dir(args.out or f"runs/experiment-{args.name}", "--out")
    from jaxintro.runtime import configure_jax

    configure_jax(devices=config.devices, compile_cache=not args.no_compile_cache)
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
