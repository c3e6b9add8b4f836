"""The site's build steps of its own: pages made from files outside docs/, so that nothing is written twice.

A page holding the line `{{ notebook: NAME.py }}` (docs/notebook.md, docs/notebook.es.md) is built with the
notebook notebooks/NAME.py in its place: markdown cells as prose, code cells as Python blocks, no outputs
(nothing is executed here: the suite runs the notebooks themselves, tests/test_notebooks.py). A page holding
`{{ readme: NAME.md }}` (docs/index.md, docs/index.es.md) is the README, its links made the site's own.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
PLACE = re.compile(r"^\{\{ (notebook|readme): ([\w.]+) \}\}$", re.M)
# The link from one notebook to the other: on the site, the language switcher does that job.
OTHER_LANGUAGE = re.compile(r" ?\(\[(Versión en español|English version)\]\(\w+\.ipynb\)\.\)")
# A README's link to the other README, and the part of its links that leads into docs/.
OTHER_README = re.compile(r"; \[(versión en español|English version)\]\(README(\.es)?\.md\)")
INTO_DOCS = re.compile(r"\]\(docs/")


def render(source: Path) -> str:
    """A jupytext notebook as markdown: its cells in order, without the notebook's own metadata."""
    notebook = jupytext.read(source)
    notebook.metadata = {}
    for cell in notebook.cells:
        cell.metadata = {}
    return OTHER_LANGUAGE.sub("", jupytext.writes(notebook, fmt="md"))


def readme(source: Path) -> str:
    """A README as the site's home page: its links into docs/ made relative to the page."""
    return INTO_DOCS.sub("](", OTHER_README.sub("", source.read_text(encoding="utf-8")))


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Put the named notebook or README where a page asks for it."""
    made = {"notebook": lambda name: render(ROOT / "notebooks" / name), "readme": lambda name: readme(ROOT / name)}
    return PLACE.sub(lambda m: made[m[1]](m[2]), markdown)
