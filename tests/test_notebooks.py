"""The lesson's notebooks: in step with their jupytext sources, without outputs, and run with their numbers checked.

Both notebooks run top to bottom in a real Jupyter kernel (nbclient, ipykernel) on this interpreter, with small
values injected after their `parameters` cell (papermill's convention): a few epochs on a subset of MNIST from
../shared/data/mnist, or scikit-learn's bundled digits when that is absent. The English one's numbers are checked;
the Spanish one runs the same code (only the texts it shows differ) and prints the same numbers in Spanish words.
"""

from __future__ import annotations

import ast
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


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, nbformat.NotebookNode]:
    """Both notebooks, run once for the module's tests with `small_run()`'s values, by language."""
    folder = tmp_path_factory.mktemp("kernel")
    with pytest.MonkeyPatch.context() as monkeypatch:
        kernel_env(folder, monkeypatch)
        values = small_run()
        runs = {}
        for lang, stem in LANGUAGES.items():
            notebook = jupytext.read(NOTEBOOKS / f"{stem}.py")
            inject(notebook, values)
            client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                                    resources={"metadata": {"path": str(folder)}})
            client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails
            runs[lang] = notebook
        return runs


def kernel_env(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernelspec named like the notebooks' that runs this interpreter, and Jupyter's folders all under `folder`."""
    spec = folder / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jaxintro (test)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(folder / "jupyter"))
    for name in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        monkeypatch.setenv(name, str(folder / name.lower()))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")


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


def plots(cell: nbformat.NotebookNode) -> int:
    """How many images a code cell drew inline."""
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def cell_with(notebook: nbformat.NotebookNode, line: str) -> nbformat.NotebookNode:
    """The one code cell whose source contains `line`."""
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and line in cell.source]
    assert len(cells) == 1, f"{len(cells)} code cells contain {line!r}"
    return cells[0]


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


SHOWN_KEYWORDS = {"xlabel", "ylabel", "title"}  # a plot's words, translated like a print's


class _WithoutShownText(ast.NodeTransformer):
    """A cell's syntax tree with the texts it shows (a print's strings, an f-string's words, a plot's labels)
    blanked, and those texts kept in order in `shown`: what may differ between the languages."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def _blank(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.shown.append(node.value)
            return ast.Constant("")
        if isinstance(node, ast.JoinedStr):  # an f-string: its words blanked, its values kept, in order
            self.shown.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
            return ast.JoinedStr([self.visit(v) for v in node.values if isinstance(v, ast.FormattedValue)])
        return self.visit(node)

    def visit_Call(self, node: ast.Call) -> ast.Call:
        printed = isinstance(node.func, ast.Name) and node.func.id == "print"
        node.func = self.visit(node.func)
        node.args = [self._blank(arg) if printed else self.visit(arg) for arg in node.args]
        for keyword in node.keywords:
            keyword.value = self._blank(keyword.value) if keyword.arg in SHOWN_KEYWORDS else self.visit(keyword.value)
        return node


def without_shown_text(source: str) -> tuple[str, list[str]]:
    """A code cell's syntax tree, as text, without the texts it shows; and those texts."""
    blanker = _WithoutShownText()
    return ast.dump(blanker.visit(ast.parse(source))), blanker.shown


def prose(text: str, source: str) -> bool:
    """True when a shown text holds a word that is not a name of its cell's code ("same key" is, "x =" is not)."""
    names = {tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.NAME}
    return any(word not in names for word in re.findall(r"[A-Za-z_]\w*", text) if len(word) >= 3)


def test_both_languages_run_the_same_code_and_show_their_own_words():
    english, spanish = (jupytext.read(NOTEBOOKS / f"{stem}.py") for stem in LANGUAGES.values())
    assert english.metadata == spanish.metadata  # the same kernel
    assert [c.cell_type for c in english.cells] == [c.cell_type for c in spanish.cells]
    for en, es in zip(english.cells, spanish.cells):
        if en.cell_type == "code":
            (en_code, en_shown), (es_code, es_shown) = without_shown_text(en.source), without_shown_text(es.source)
            assert en_code == es_code, (en.source, es.source)
            assert en.metadata == es.metadata
            assert len(en_shown) == len(es_shown), (en_shown, es_shown)
            untranslated = [e for e, s in zip(en_shown, es_shown) if e == s and prose(e, en.source)]
            assert not untranslated, f"the Spanish notebook shows English: {untranslated}"


def test_the_spanish_notebook_prints_the_english_ones_numbers_in_spanish(executed):
    """Cell by cell the same numbers (the same code, the same seeds), the same plots, and none of the English words."""
    english_words = [text.strip() for cell in jupytext.read(NOTEBOOKS / f"{LANGUAGES['en']}.py").cells
                     if cell.cell_type == "code" for text in without_shown_text(cell.source)[1]
                     if prose(text, cell.source)]
    number = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
    for en, es in zip(executed["en"].cells, executed["es"].cells):
        if en.cell_type != "code":
            continue
        assert number.findall(text_of(es)) == number.findall(text_of(en)), (text_of(en), text_of(es))
        assert plots(es) == plots(en), es.source
        shown = [word for word in english_words if word and word in text_of(es)]
        assert not shown, (shown, text_of(es))


def test_notebook_runs_and_prints_the_lessons_numbers(executed):
    notebook, values = executed["en"], small_run()
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
        if not plots(cell_with(notebook, line)):
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
