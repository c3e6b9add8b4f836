"""The lesson's notebooks: in step with their jupytext sources, without outputs, and run with their numbers checked.

The English notebook runs top to bottom in a real Jupyter kernel (nbclient, ipykernel) on this interpreter
(the Spanish one's code is checked to be the same, token for token),
with small values injected after its `parameters` cell (papermill's convention): a few epochs on a
subset of MNIST from ../shared/data/mnist, or scikit-learn's bundled digits when that is absent.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tokenize
from pathlib import Path

import jax
import jupytext
import nbformat
import optax
import pytest
from nbclient import NotebookClient

from conftest import MNIST_DIR, REPO
from jaxintro.data import load_dataset

NOTEBOOKS = REPO / "notebooks"
LANGUAGES = {"en": "introduction_to_jax", "es": "introduccion_a_jax"}
KERNEL = "jaxintro"  # the kernelspec name the notebooks ask for (`make notebooks` registers it)
CELL_TIMEOUT_S = 120
EPOCHS = 3
MNIST_SUBSET = 4096  # training images when MNIST is here; the digits set is small enough whole

# Each check: a line of a code cell (identical in both languages) and a pattern its whole text output must match.
# Numbers are what the maths says they are, not what a run happened to print.
FLOAT = r"-?\d+\.\d+(?:e-?\d+)?"
CHECKS = [
    ('print("jitted_add_one(1.0) =", jitted_add_one(1.0))',
     r"  tracing add_one with x = .*\njitted_add_one\(1\.0\) = 2\.0\njitted_add_one\(2\.0\) = 3\.0\n"),
    ('jitted_times_scale = jax.jit(times_scale)',
     r"scale = 2\.0:  jitted_times_scale\(3\.0\) = 6\.0\n"
     r"scale = 10\.0: jitted_times_scale\(3\.0\) = 6\.0\n"
     r"scale = 10\.0: times_scale\(3\.0\) = 30\.0\n"),
    ('print("x =", x, x.dtype)',
     r"x = \[0\. 1\. 2\. 3\. 4\.\] float32\nNumPy's default: float64\nTypeError: JAX arrays are immutable.*\n"),
    ('y = x.at[0].set(10.0)',
     r"x\.at\[0\]\.set\(10\.0\)   -> \[10\.  1\.  2\.  3\.  4\.\]\n"
     r"x\.at\[1:3\]\.add\(100\.0\) -> \[  0\. 101\. 102\.   3\.   4\.\]\n"
     r"x is unchanged:        \[0\. 1\. 2\. 3\. 4\.\]\n"),
    ('print("grad(f)(3.0) =", jax.grad(f)(3.0))',
     r"f\(3\.0\) = 9\.0\ngrad\(f\)\(3\.0\) = 6\.0\ngrad\(grad\(f\)\)\(3\.0\) = 2\.0\n"),
    ('dg_dx, dg_dy = jax.grad(g, argnums=(0, 1))(0.0, 2.0)',
     r"at \(0, 2\): dg/dx = 3\.0  dg/dy = 0\.0\nvalue_and_grad\(f\)\(3\.0\) = \(9\.0, 6\.0\)\n"),
    ('points = jnp.array([0.0, 1.0, 2.0, 3.0])',
     r"jit\(grad\(f\)\)\(3\.0\) = 6\.0\nvmap\(grad\(f\)\)\(points\) = \[0\. 2\. 4\. 6\.\]\n"),
    ('jaxpr = jax.make_jaxpr(dense)(w, b, batch_x)',
     r"\{ lambda ; a:f32\[3,2\] b:f32\[2\] c:f32\[4,3\]\. let(.|\n)*dot_general(.|\n)*tanh(.|\n)*\}\n"
     r"primitives: \[.*'dot_general'.*'tanh'\]\n"),
    ('print("calls: 4, traces:", len(traced_shapes), traced_shapes)',
     r"calls: 4, traces: 2 \[\(3,\), \(4,\)\]\n"),
    ('relu_with_where = jax.jit(lambda x: jnp.where(x > 0, x, 0.0))',
     r"TracerBoolConversionError\nrelu_with_where\(-2\.0\) = 0\.0  relu_with_where\(3\.0\) = 3\.0\n"),
    ('batched_predict = jax.vmap(predict, in_axes=(None, None, 0))',
     # x·w + b for the rows [0 1 2], [3 4 5], ... and w = [1, -2, 0.5], b = 0.1
     r"batched_predict\(w, b, batch_x\) = \[-0\.9 -2\.4 -3\.9 -5\.4\]\nequals batch_x @ w \+ b: True\n"),
    ('per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(w, batch_x, batch_y)',
     r"per-example gradients: \(4, 3\)\nequal to 2 \(x·w - y\) x by hand: True\n"
     r"their mean equals the batch gradient: True\n"),
    ('print(jax.tree.map(jnp.shape, tree))',
     r"\{'layer1': \{'b': \(256,\), 'w': \(784, 256\)\}, 'layer2': \{'b': \(10,\), 'w': \(256, 10\)\}\}\n"
     r"leaves: 4  scalars: 203530\n"  # 784*256 + 256 + 256*10 + 10
     r"one SGD step, lr 0\.1: layer1 w\[0, 0\] = 0\.9\n"),
    ('print("same key, same numbers:", bool(jnp.array_equal(a, b)))',
     r"same key, same numbers: True\na split-off key, other numbers: True\nthree keys at once: \(3,\)\n"),
    ('print("same as jaxintro\'s mlp_forward:", bool(jnp.allclose(',
     r"logits: \(128, 10\)\nsame as jaxintro's mlp_forward: True\n"),
    ('print("same as jaxintro\'s cross_entropy:", bool(',
     rf"loss before training: {FLOAT}\nsame as jaxintro's cross_entropy: True\n"),
    ('print("same parameters as jaxintro.lesson.train_step:",',
     r"same parameters as jaxintro\.lesson\.train_step: True\n"),
    ('print("restored equals saved:", jax.tree.all(',
     rf"restored equals saved: True\ntest accuracy of the restored parameters: {FLOAT}\n"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EPOCH_LINE = re.compile(rf"Epoch +(\d+) \| Loss: ({FLOAT}) \| Test Acc: ({FLOAT})")


@pytest.fixture
def kernel_env(tmp_path, monkeypatch) -> Path:
    """A kernelspec named like the notebooks' that runs this interpreter, and Jupyter's folders all under tmp_path."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jaxintro (test)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    for name in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return tmp_path


def small_run() -> dict[str, object]:
    """The parameters the test injects: MNIST's first images when the shared copy is here, else the digits (not
    under CI, where the shared copy is always beside the checkout: a silent fall-back would test less)."""
    if (MNIST_DIR / "train-images-idx3-ubyte.gz").exists():
        return {"EPOCHS": EPOCHS, "TRAIN_SIZE": MNIST_SUBSET, "DATASET": "mnist", "DATA_DIR": str(MNIST_DIR)}
    if os.environ.get("CI"):
        pytest.fail(f"canonical MNIST not found at {MNIST_DIR}: CI runs the notebook on it")
    return {"EPOCHS": EPOCHS, "TRAIN_SIZE": None, "DATASET": "digits", "DATA_DIR": None}


def inject(notebook: nbformat.NotebookNode, values: dict[str, object]) -> None:
    """Add a cell after the one tagged `parameters` that sets `values` (what papermill does)."""
    tagged = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1, "a notebook needs exactly one cell tagged 'parameters'"
    source = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(tagged[0] + 1, cell)


def text_of(cell: nbformat.NotebookNode) -> str:
    """What a code cell printed: its stdout streams, joined, without colours (JAX colours a jaxpr in Jupyter)."""
    printed = "".join(out.get("text", "") for out in cell.get("outputs", []) if out.get("name") == "stdout")
    return ANSI.sub("", printed)


def cell_with(notebook: nbformat.NotebookNode, line: str) -> nbformat.NotebookNode:
    """The one code cell whose source contains `line`."""
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and line in cell.source]
    assert len(cells) == 1, f"{len(cells)} code cells contain {line!r}"
    return cells[0]


def code_tokens(source: str) -> list[tuple[int, str]]:
    """A code cell's tokens without its comments: what runs, whatever language the comments are in."""
    skip = {tokenize.COMMENT, tokenize.NL}
    return [(tok.type, tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type not in skip]


def comparable(notebook: nbformat.NotebookNode) -> dict:
    """A notebook without what varies between builds (cell ids) or what Jupyter adds on save (language_info)."""
    metadata = {k: v for k, v in notebook.metadata.items() if k != "language_info"}
    cells = [{"cell_type": c.cell_type, "source": c.source, "metadata": dict(c.metadata)} for c in notebook.cells]
    return {"metadata": metadata, "cells": cells}


def test_each_language_has_a_source_and_its_notebook():
    for stem in LANGUAGES.values():
        assert (NOTEBOOKS / f"{stem}.py").is_file(), stem
        assert (NOTEBOOKS / f"{stem}.ipynb").is_file(), f"{stem}.ipynb is missing: run make notebooks"
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == set(LANGUAGES.values())


@pytest.mark.parametrize("stem", LANGUAGES.values())
def test_committed_notebook_is_its_source_without_outputs(stem):
    committed = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    nbformat.validate(committed)
    # What `jupytext --to ipynb` writes from the source (reading it adds the text format's metadata).
    generated = nbformat.reads(jupytext.writes(jupytext.read(NOTEBOOKS / f"{stem}.py"), fmt="ipynb"), as_version=4)
    assert comparable(committed) == comparable(generated), \
        f"notebooks/{stem}.ipynb is out of date with notebooks/{stem}.py: run make notebooks"
    for cell in committed.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, \
                f"notebooks/{stem}.ipynb holds outputs: run make notebooks (it clears them) before committing"


def test_both_languages_run_the_same_code():
    english, spanish = (jupytext.read(NOTEBOOKS / f"{stem}.py") for stem in LANGUAGES.values())
    assert english.metadata == spanish.metadata  # the same kernel
    assert [c.cell_type for c in english.cells] == [c.cell_type for c in spanish.cells]
    for en, es in zip(english.cells, spanish.cells):
        if en.cell_type == "code":
            assert code_tokens(en.source) == code_tokens(es.source), (en.source, es.source)
            assert en.metadata == es.metadata


# The Spanish notebook's code and cell metadata are the English one's, token for token (the test above): running
# the English notebook runs the code of both.
def test_notebook_runs_and_prints_the_lessons_numbers(kernel_env):
    notebook = jupytext.read(NOTEBOOKS / f"{LANGUAGES['en']}.py")
    values = small_run()
    inject(notebook, values)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(kernel_env)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails
    wrong = []
    versions = text_of(cell_with(notebook, "import orbax.checkpoint as ocp"))
    if not re.fullmatch(rf"jax {re.escape(jax.__version__)} optax {re.escape(optax.__version__)} on \w+\n", versions):
        wrong.append(f"the versions printed are not this environment's: {versions}")
    for line, pattern in CHECKS:
        printed = text_of(cell_with(notebook, line))
        if not re.fullmatch(pattern, printed):
            wrong.append(f"the cell with {line!r} printed:\n{printed}\nexpected (regex): {pattern}")
    for line in ("data = load_dataset(DATASET, DATA_DIR)", "fig, (loss_ax, acc_ax) = plt.subplots(",
                 'print("predictions:", predictions.tolist())'):
        if not any("image/png" in out.get("data", {}) for out in cell_with(notebook, line).outputs):
            wrong.append(f"the cell with {line!r} drew no inline plot")
    assert not wrong, "\n\n".join(wrong)
    check_training(notebook, values)


def check_training(notebook: nbformat.NotebookNode, values: dict[str, object]) -> None:
    """The data, the model's size and initialisation, both trainings, the schedule and the checkpoint."""
    mnist = values["DATASET"] == "mnist"
    pixels, train_size = (784, MNIST_SUBSET) if mnist else (64, 1437)
    loaded = text_of(cell_with(notebook, "data = load_dataset(DATASET, DATA_DIR)"))
    assert loaded.startswith(f"{values['DATASET']}: {train_size} training and "
                             f"{10000 if mnist else 360} test images of {pixels} pixels\n"), loaded
    init = text_of(cell_with(notebook, "params = init_params(init_key, sizes)"))
    count = pixels * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10  # 235,146 on MNIST, as in the lesson
    shapes = (f"{{'layer1': {{'b': (256,), 'w': ({pixels}, 256)}}, 'layer2': {{'b': (128,), 'w': (256, 128)}}, "
              "'layer3': {'b': (10,), 'w': (128, 10)}}\n")
    assert init.startswith(shapes + f"parameters: {count}\n"), init
    std, expected_std = map(float, re.search(rf"std of layer1 w: ({FLOAT}), sqrt\(2 / fan_in\) = ({FLOAT})",
                                             init).groups())
    assert expected_std == pytest.approx((2 / pixels) ** 0.5, abs=1e-4)
    assert std == pytest.approx(expected_std, rel=0.05), "He init: N(0, 2 / fan_in)"
    before = float(re.search(rf"loss before training: ({FLOAT})", text_of(
        cell_with(notebook, "loss_before = loss_fn(params"))).group(1))
    assert 1.5 < before < 6.0, before  # near ln 10 = 2.30 for an untrained classifier
    first, after = map(float, re.fullmatch(rf"loss of the first batch: ({FLOAT}), after one step: ({FLOAT})\n",
                                           text_of(cell_with(notebook, "stepped_params, _, loss = step("))).groups())
    assert first == pytest.approx(before, rel=1e-5) and after < first
    final = {}
    for line in ("params, history = train(params, adam", "chained_params, chained_history = train("):
        printed = text_of(cell_with(notebook, line))
        epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH_LINE.findall(printed)]
        assert [e for e, _, _ in epochs] == list(range(1, EPOCHS + 1)), printed
        assert epochs[-1][1] < epochs[0][1], f"the training loss did not fall:\n{printed}"
        assert epochs[-1][2] > 0.5, f"test accuracy not far above chance (0.1):\n{printed}"
        final[line] = epochs[-1][2]
    steps = EPOCHS * (train_size // 128)
    schedule = text_of(cell_with(notebook, "schedule = optax.warmup_cosine_decay_schedule("))
    lines = (f"learning rate at step 0: 0.00e+00\nlearning rate at step {max(1, steps // 10)}: 1.00e-03\n"
             f"learning rate at step {steps}: 1.00e-05\n")
    assert schedule.startswith(lines), schedule
    before_clip = float(re.fullmatch(rf"global norm before clipping: ({FLOAT}), after: 1\.0000\n",
                                     schedule[len(lines):]).group(1))
    assert before_clip == pytest.approx(100 * count ** 0.5, rel=1e-4)  # 100 in each of `count` scalars, float32 sum
    labels = load_dataset(str(values["DATASET"]), values["DATA_DIR"]).y_test[:8].tolist()
    shown = text_of(cell_with(notebook, 'print("predictions:", predictions.tolist())'))
    guesses = re.fullmatch(rf"predictions: (\[[\d, ]+\])\nlabels:      {re.escape(str(labels))}\n", shown)
    assert guesses and all(0 <= g < 10 for g in json.loads(guesses.group(1))), shown
    # A model above 50 % (checked above) gets most of eight right; one that predicts a constant gets one or two.
    right = sum(g == label for g, label in zip(json.loads(guesses.group(1)), labels))
    assert right >= 6, (right, shown)
    restored = text_of(cell_with(notebook, 'print("restored equals saved:"'))
    trained = final["params, history = train(params, adam"]
    assert restored.endswith(f"test accuracy of the restored parameters: {trained:.4f}\n"), restored
