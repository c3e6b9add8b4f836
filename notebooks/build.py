"""Regenerate each notebook (.ipynb) from its jupytext source (.py), without outputs (`make notebooks`).

A cell whose type and source are unchanged keeps the id it has in the committed notebook, so a
rebuild changes only the cells that changed and the diff stays reviewable.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import nbformat

HERE = Path(__file__).resolve().parent


def sources(folder: Path = HERE) -> list[Path]:
    """The notebooks' jupytext sources: every percent-format .py beside this script but itself."""
    return sorted(path for path in folder.glob("*.py") if path.name != Path(__file__).name)


def keep_ids(notebook: nbformat.NotebookNode, committed: nbformat.NotebookNode) -> None:
    """Give each cell the id of an unused committed cell with the same type and source (ids are random otherwise)."""
    unused = {}
    for cell in committed.cells:
        unused.setdefault((cell.cell_type, cell.source), []).append(cell.get("id"))
    for cell in notebook.cells:
        ids = unused.get((cell.cell_type, cell.source))
        if ids:
            cell["id"] = ids.pop(0)


def build(source: Path) -> Path:
    """Write `source`'s notebook beside it, with empty outputs; return its path."""
    target = source.with_suffix(".ipynb")
    notebook = jupytext.read(source)
    if target.exists():
        keep_ids(notebook, nbformat.read(target, as_version=4))
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    jupytext.write(notebook, target, fmt="ipynb")
    return target


if __name__ == "__main__":
    for path in sources():
        print("wrote", os.path.relpath(build(path)))
