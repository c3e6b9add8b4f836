"""`jaxintro predict RUN_DIR IMAGE...`: classify image files with a trained run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxintro.errors import DataError, error_line
from jaxintro.i18n import _, format_number, list_separator, printable
from jaxintro.jsonio import json_text


def run(args: argparse.Namespace) -> int:
    """Print the top-3 classes of every image that can be read, and one line for each that cannot; exit 2 if any
    could not (every image is read before any output; with none readable, the first one's error alone)."""
    import numpy as np

    from jaxintro.evaluate import load_run, predict_proba
    from jaxintro.images import load_image

    loaded = load_run(Path(args.run_dir), args.setting)
    shape = loaded.dataset.image_shape
    images, refused = {}, {}
    for path in args.images:
        try:
            images[path] = load_image(Path(path), shape)
        except DataError as exc:  # this image only: the others are still classified
            refused[path] = exc
    if not images:
        raise next(iter(refused.values()))
    probs = dict(zip(images, predict_proba(loaded, np.stack(list(images.values())))))
    classes = loaded.dataset.classes
    note = loaded.usage_note()  # several members: which of them answer (a sweep: one setting's; never a diverged one)
    if note:
        print(_("{run_dir} holds {count} models: these are the probabilities of {what}").format(
            run_dir=printable(args.run_dir), count=loaded.members, what=note))
    results = []
    for path in args.images:
        if path in refused:
            print(error_line("predict", refused[path]), file=sys.stderr)
            results.append({"file": path, "error": str(refused[path])})
            continue
        p = probs[path]
        top = np.argsort(p)[::-1][:3]
        results.append({"file": path, "digit": int(top[0]), "class": classes[int(top[0])],
                        "probabilities": {classes[int(i)]: float(p[i]) for i in range(len(p))},
                        "top3": [[classes[int(i)], float(p[i])] for i in top]})
        # A file's name may hold escapes or newlines: shown escaped, as the image errors show it.
        name, shown = printable(path), [printable(c) for c in classes]
        print(f"{name}: {shown[int(top[0])]}  (" + list_separator().join(
            f"{shown[int(i)]}: {format_number(float(p[i]), '.3f')}" for i in top) + ")")
    if args.json:
        for r in results:
            print(json_text(r))
    return 2 if refused else 0  # 2, as a command's error: an image was not classified
