"""`jaxintro grads`: exercise 2, per-example gradients and their norms."""

from __future__ import annotations

import argparse

from jaxintro.i18n import _, format_number
from jaxintro.jsonio import json_text
from jaxintro.runs import writable_dir


def run(args: argparse.Namespace) -> int:
    """Explain per-example gradients on `--n` test images; with `--bench`, time three ways to get their norms."""
    out_dir = writable_dir(args.out, "--out")
    from jaxintro.experiments import explain_grads, grads_benchmark

    report, lines, subject = explain_grads(args.run, args.dataset, args.data_dir, n=args.n, seed=args.seed,
                                           out=out_dir, setting=args.setting)
    for line in lines:
        print(line)
    if args.bench:
        timing = grads_benchmark(subject, n=max(args.n, 128))
        report["bench"] = timing
        print("\n" + _("Per-example gradient norms of {n} examples (median ms, warm, jitted):").format(n=timing["n"]))
        for name in ("loop", "vmap", "fast", "torch-func-vmap"):
            if name in timing["ms"]:
                print(f"  {name:<16}{format_number(timing['ms'][name], '9.2f')} ms   "
                      + _("{speedup:7.1f}x vs loop").format(speedup=timing["ms"]["loop"] / timing["ms"][name]))
        if "torch_skipped" in timing:
            print("  " + _("torch-func-vmap skipped: {why}").format(why=timing["torch_skipped"]))
    if args.json:
        print(json_text(report))  # an exploded run's infinite norms as null
    return 0
