"""`jaxintro predict RUN_DIR IMAGE...`: classify image files with a trained run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from jaxintro.i18n import _, printable


def run(args: argparse.Namespace) -> int:
    """Print the top-3 classes of every image (every file is checked before any output)."""
    import numpy as np

    from jaxintro.evaluate import load_run, predict_proba
    from jaxintro.images import load_image

    loaded = load_run(Path(args.run_dir), args.setting)
    shape = loaded.dataset.image_shape
    images = np.stack([load_image(Path(p), shape) for p in args.images])
    probs = predict_proba(loaded, images)
    classes = loaded.dataset.classes
    note = loaded.usage_note()  # several members: which of them answer (a sweep: one setting's; never a diverged one)
    if note:
        print(_("{run_dir} holds {count} models: these are the probabilities of {what}").format(
            run_dir=printable(args.run_dir), count=loaded.members, what=note))
    results = []
    for path, p in zip(args.images, probs):
        top = np.argsort(p)[::-1][:3]
        results.append({"file": path, "digit": int(top[0]), "class": classes[int(top[0])],
                        "probabilities": {classes[int(i)]: float(p[i]) for i in range(len(p))},
                        "top3": [[classes[int(i)], float(p[i])] for i in top]})
        # A file's name may hold escapes or newlines: shown escaped, as the image errors show it.
        name, shown = printable(path), [printable(c) for c in classes]
        print(f"{name}: {shown[int(top[0])]}  (" + ", ".join(f"{shown[int(i)]}: {p[i]:.3f}" for i in top) + ")")
    if args.json:
        for r in results:
            print(json.dumps(r))
    return 0
