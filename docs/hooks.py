"""The site's build steps of its own: pages made from files outside docs/, so that nothing is written twice.

A page holding the line `{{ notebook: NAME.py }}` (docs/notebook.md, docs/notebook.es.md) is built with the
notebook notebooks/NAME.py in its place: markdown cells as prose, code cells as Python blocks, no outputs
(nothing is executed here: the suite runs the notebooks themselves, tests/test_notebooks.py). A page holding
`{{ readme: NAME.md }}` (docs/index.md, docs/index.es.md) is the README, its links made the site's own. A page
holding `{{ flags: COMMAND }}` (docs/commands.md and its twin) gets a table of that command's flags, built from the
parser the command line uses, in the page's language: a new flag or choice is in the docs without a word written.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import jupytext

from jaxintro.cli import build_parser, shows_default
from jaxintro.i18n import in_language

ROOT = Path(__file__).resolve().parents[1]
PLACE = re.compile(r"^\{\{ (notebook|readme|flags): ([\w.]+) \}\}$", re.M)
# The link from one notebook to the other: on the site, the language switcher does that job.
OTHER_LANGUAGE = re.compile(r" ?\(\[(Versión en español|English version)\]\(\w+\.ipynb\)\.\)")
# A README's link to the other README, and the part of its links that leads into docs/.
OTHER_README = re.compile(r"; \[(versión en español|English version)\]\(README(\.es)?\.md\)")
INTO_DOCS = re.compile(r"\]\(docs/")
FLAG_COLUMNS = {"en": ("flag", "default", "what it does"), "es": ("opción", "por defecto", "qué hace")}


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


def flags(command: str, language: str) -> str:
    """`jaxintro COMMAND`'s flags as a markdown table (flag, default, what it does), in `language`."""
    with in_language(language):  # the help strings are translated as the parser is built
        parser = build_parser()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        formatter = argparse.HelpFormatter(f"jaxintro {command}")  # the help alone: the default has its column
        rows = [flag_row(action, formatter) for action in commands.choices[command]._actions if action.option_strings]
    head = f"| {' | '.join(FLAG_COLUMNS[language])} |\n| --- | --- | --- |\n"
    return head + "\n".join(rows) + "\n"


def flag_row(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """One flag's row: its names (and choices or value), its default, its help."""
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.choices:
        names += " `{" + ",".join(map(str, action.choices)) + "}`"
    elif action.nargs != 0:
        names += f" `{action.metavar or action.dest.upper()}`"
    default = f"`{action.default}`" if shows_default(action) else ""
    # As `--help` prints it (`%%` is `%`); a pipe in prose would end the cell.
    text = formatter._expand_help(action).replace("|", r"\|") if action.help else ""
    return f"| {names} | {default} | {text} |"  # a pipe in a code span is no column's end


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Put the named notebook, README or flags table where a page asks for it."""
    language = "es" if page.file.src_uri.endswith(".es.md") else "en"
    made = {"notebook": lambda name: render(ROOT / "notebooks" / name), "readme": lambda name: readme(ROOT / name),
            "flags": lambda name: flags(name, language)}
    return PLACE.sub(lambda m: made[m[1]](m[2]), markdown)
