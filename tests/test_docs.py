"""Every Python code block in the READMEs, the documentation's pages and the lesson's documents runs against the
pinned versions."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import as_users_compile, once_per_run

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "README.es.md", "outputs/prompt-jax-optimizer.md", "outputs/skill-jax-patterns.md",
        *(f"docs/{p.name}" for p in sorted((REPO / "docs").glob("*.md")))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return [textwrap.dedent(b) for b in BLOCK.findall(path.read_text(encoding="utf-8"))]


def test_every_document_exists():
    for doc in DOCS:
        assert (REPO / doc).is_file(), doc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder as a reader has it after `make train`: a finished run in runs/mnist (on digits: offline, quick).

    Trained once per test run; each worker reads a copy of its own, where the blocks may write what they like."""
    def train(folder: Path) -> None:
        with as_users_compile(here=False):
            subprocess.run([sys.executable, "-m", "jaxintro.cli", "train", "--dataset", "digits", "--epochs", "10",
                            "--run-dir", "runs/mnist"], cwd=folder, check=True, capture_output=True, timeout=300)

    trained, _ = once_per_run(tmp_path_factory, "reader", train)
    folder = tmp_path_factory.mktemp("reader")
    shutil.copytree(trained, folder, dirs_exist_ok=True)
    return folder


# A `print(...)` whose comment shows what it prints: `# (8, 4, 3)`, `# ['a', 'b']: why`, `# ~1e-7`, `# <1e-6: why`.
SHOWN = re.compile(r"^(?P<indent>\s*)print\((?P<args>.*)\)\s+# (?P<shown>[(\[~<].*)$")
# Each such print also writes what it printed and what the document shows, for the test to compare.
RECORD = """import io as _io, sys as _sys
def _shown(_expected, *args, **kwargs):
    _buffer = _io.StringIO()
    print(*args, file=_buffer, **kwargs)
    _sys.stdout.write(_buffer.getvalue())
    _sys.stderr.write("SHOWN" + chr(9) + repr((_expected, _buffer.getvalue().strip())) + chr(10))
"""


def recorded(block: str) -> str:
    """`block` with every print that shows its output in a comment turned into a recorded one."""
    lines = []
    for line in block.splitlines():
        m = SHOWN.match(line)
        lines.append(f"{m['indent']}_shown({m['shown'].strip()!r}, {m['args']})" if m else line)
    return "\n".join(lines)


def agrees(shown: str, printed: str) -> bool:
    """Whether the printed text is what the comment shows: `<X` a number below X, `~X` within a factor of 3 of X,
    else the value itself (the comment's text before a `:` that explains it)."""
    value = shown.split(":")[0].strip()
    if value.startswith("<"):
        return abs(float(printed)) < float(value[1:])
    if value.startswith("~"):
        return float(value[1:]) / 3 <= abs(float(printed)) <= float(value[1:]) * 3
    return printed == shown.split(":")[0].strip()


def code_of(path: Path) -> list[str]:
    """A document's Python blocks as code (`ast.dump`: comments left out) and the values its prints show."""
    return [ast.dump(ast.parse(block)) + repr([m["shown"].split(":")[0].strip() for line in block.splitlines()
                                               if (m := SHOWN.match(line))]) for block in python_blocks(path)]


def blocks_of_their_own(doc: str) -> bool:
    """Whether `doc` has Python blocks other than its English twin's: a Spanish page whose blocks are the same code,
    only their comments translated, adds nothing to run."""
    path = REPO / doc
    twin = path.with_name(path.name.replace(".es.md", ".md"))
    return bool(python_blocks(path)) and (twin == path or code_of(path) != code_of(twin))


@pytest.mark.parametrize("doc", [doc for doc in DOCS if blocks_of_their_own(doc)])
@pytest.mark.usefixtures("users_compile_in_children")  # what a block prints is compared with what the reader sees
def test_python_blocks_run(doc, workdir):
    blocks = python_blocks(REPO / doc)
    # One interpreter per document: later blocks may use names from earlier ones, as a reader would.
    script = RECORD + "\n\n".join(f"# --- block {i + 1}\n{recorded(block)}" for i, block in enumerate(blocks))
    proc = subprocess.run([sys.executable, "-c", script], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{doc}:\n{proc.stderr[-3000:]}"
    # What the document shows a print gives is what it gave here.
    shown = [ast.literal_eval(line.split("\t", 1)[1]) for line in proc.stderr.splitlines() if line.startswith("SHOWN\t")]
    assert len(shown) == sum(bool(SHOWN.match(line)) for block in blocks for line in block.splitlines()), doc
    for expected, printed in shown:
        assert agrees(expected, printed), (doc, expected, printed)


def test_every_executed_block_can_fail():
    """No block hides its body behind a condition on the reader's files (an `if` that skips in a test)."""
    for doc in DOCS:
        for block in python_blocks(REPO / doc):
            assert not re.search(r"^if (runs|os\.path\.exists|Path\(.*\)\.exists)", block, re.M), (doc, block)


def test_the_orbax_snippet_reads_the_newest_checkpoint(workdir):
    block = next(b for b in python_blocks(REPO / "docs" / "checkpoints.md") if "StandardCheckpointer" in b)
    out = subprocess.run([sys.executable, "-c", block], cwd=workdir, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("10 {'layer1': (64, 256)"), out.stdout  # epoch 10, not 9 (sorted as numbers)


def test_blocks_are_found():
    assert len(python_blocks(REPO / "outputs/skill-jax-patterns.md")) >= 5
