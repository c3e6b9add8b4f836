"""Every Python code block in the READMEs and the lesson's documents runs against the pinned versions."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "README.es.md", "outputs/prompt-jax-optimizer.md", "outputs/skill-jax-patterns.md",
        "docs/performance.md", "docs/reliability.md", "docs/parallel.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return [textwrap.dedent(b) for b in BLOCK.findall(path.read_text(encoding="utf-8"))]


def test_every_document_exists():
    for doc in DOCS:
        assert (REPO / doc).is_file(), doc


@pytest.mark.parametrize("doc", DOCS)
def test_python_blocks_run(doc, tmp_path):
    blocks = python_blocks(REPO / doc)
    if not blocks:
        pytest.skip(f"{doc} has no Python blocks")
    # One interpreter per document: later blocks may use names from earlier ones, as a reader would.
    script = "\n\n".join(f"# --- block {i + 1}\n{block}" for i, block in enumerate(blocks))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "JAXINTRO_DOCS_TEST": "1"})
    assert proc.returncode == 0, f"{doc}:\n{proc.stderr[-3000:]}"


def test_blocks_are_found():
    assert len(python_blocks(REPO / "outputs/skill-jax-patterns.md")) >= 5
