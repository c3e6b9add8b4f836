"""Every output the READMEs and the documentation's pages show is output the program prints today.

Two checks. Commands that answer at once (errors, the data table, the tour's sections) are run as shown,
and their output must be the README's, line for line. Every other shown line, from the long MNIST runs, must
be one the program can print: it matches one of the program's message templates (its gettext messages in
the README's language, its f-strings), numbers and names free, or, for a table row, holds only numbers and
words that the program itself prints. A line reworded in the code and not in the README fails either way.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import string
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from conftest import MNIST_DIR, REPO

SRC = REPO / "src" / "jaxintro"
PO = SRC / "locale" / "es" / "LC_MESSAGES" / "jaxintro.po"
# Every document that shows the program's output, and its language: the READMEs and every page of the site.
READMES = {"README.md": "en", "README.es.md": "es",
           **{f"docs/{p.name}": "es" if p.name.endswith(".es.md") else "en" for p in sorted((REPO / "docs").glob("*.md"))}}
BLOCK = re.compile(r"^```text\n(.*?)^```", re.S | re.M)
# Commands quick enough to run as the README shows them (no training): their output is compared exactly.
RUN_EXACTLY = re.compile(r"^(LANG=\S+ )?jaxintro (--lang \w+ )?(tour --section|data --data-dir|train --batch-size 0|"
                         r"train --seeds 2 --loop python)")
NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?")
PATH = re.compile(r"\S*/\S*|\S+\.(?:py|png|json|jsonl)\b")  # a folder or file name: a field
WORD = re.compile(r"[A-Za-zÀ-ÿ_][\w'-]*")
# The share of a line's characters (fields aside) a template's own words must cover, so "{a}: {b}" matches nothing;
# a template with LONG_ENOUGH characters of its own is specific enough whatever its fields hold (a joined list).
COVERAGE, LONG_ENOUGH = 0.35, 20


def sections(path: Path) -> list[tuple[str | None, list[str]]]:
    """(command or None, the lines shown after it) for every ```text block of a README."""
    found = []
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        command, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None or lines:
                    found.append((command, lines))
                command, lines = line[2:], []
            else:
                lines.append(line)
        found.append((command, lines))
    return found


def to_regex(template: str) -> tuple[re.Pattern, int, str]:
    """A message template as a regex (each field a group that matches anything), how many literal characters it
    holds, and its longest literal piece (a line without it cannot match)."""
    parts, literal = [], 0
    try:
        pieces = list(string.Formatter().parse(template))
    except ValueError:
        pieces = [(template, None, None, None)]
    for text, field, _spec, _conv in pieces:
        for chunk in re.split(r"(%\(\w+\)[sdrf]|%[sdr])", text):
            if re.fullmatch(r"%\(\w+\)[sdrf]|%[sdr]", chunk):
                parts.append("(.*?)")
            else:
                parts.append(re.escape(chunk))
                literal += len(chunk.strip())
        if field is not None:
            parts.append("(.*?)")
    pieces_text = [re.sub(r"%\(\w+\)[sdrf]|%[sdr]", "\0", t) for t, *_ in pieces]
    longest = max((c for t in pieces_text for c in t.split("\0")), key=len, default="")
    return re.compile("".join(parts), re.S), literal, longest


def fstring_template(node: ast.JoinedStr) -> str:
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


@lru_cache(maxsize=None)
def templates(language: str) -> tuple[list[tuple[re.Pattern, int]], frozenset[str]]:
    """The program's message templates in `language` (and its f-strings), and every word they or its constants hold."""
    texts = program_texts(language)
    words = frozenset(w.lower() for text in texts for w in WORD.findall(text))
    return [to_regex(text.strip()) for text in texts if len(text.strip()) >= 3], words


@lru_cache(maxsize=None)
def word_sets(language: str) -> tuple[frozenset[str], ...]:
    """The words of each of the program's texts, one set per message or constant."""
    return tuple(frozenset(w.lower() for w in WORD.findall(text)) for text in program_texts(language))


@lru_cache(maxsize=None)
def program_texts(language: str) -> frozenset[str]:
    """Every string the program holds: its constants, its f-strings as templates, and (Spanish) its translations."""
    texts: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                texts.add(fstring_template(node))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.add(node.value)
    if language == "es":
        with PO.open("rb") as f:
            for message in read_po(f):
                strings = message.string if isinstance(message.string, (list, tuple)) else [message.string]
                texts.update(s for s in strings if s)
    return frozenset(texts)


def covered(text: str, language: str, depth: int = 2) -> int:
    """How many of `text`'s characters the program's own words account for: the best template that matches it,
    its literal characters plus, field by field, what a template of its own covers there (a message built from
    messages, as `FAILED {n} {file} [{key}]: {message}` is)."""
    patterns, _words = templates(language)
    best = 0
    for pattern, literal, longest in patterns:
        if literal < 3 or longest not in text:
            continue
        match = pattern.fullmatch(text)
        if match:
            inner = sum(covered(g, language, depth - 1) for g in match.groups() if len(g) > 8) if depth else 0
            best = max(best, literal + inner)
    parts = text.split(", ")
    if depth and len(parts) > 2 and all(own_message(part, language, depth - 1) for part in parts):
        best = max(best, len(text))  # a list the program joins from its own messages, every item one of them
    return best


def own_message(text: str, language: str, depth: int) -> bool:
    """Whether one of the program's messages is `text`, each of its fields one word (a number, a name): an item of
    a joined list cannot hide added words in a field."""
    size = len(re.sub(r"\s", "", NUMBER.sub("", PATH.sub("", text))))
    return any(literal >= max(3, COVERAGE * size) and longest in text
               and re.fullmatch(pattern.pattern.replace("(.*?)", r"(\S+?)"), text, re.S)
               for pattern, literal, longest in templates(language)[0])


def printable(line: str, language: str) -> bool:
    """Whether the program can print `line`: its own messages account for the line, or (a table row) every
    word is the program's."""
    stripped = re.sub(r"^\d+\. ", "", line.strip())  # a numbered list's item (`1. {hint}`): its text is checked
    if not stripped or stripped in ("...", "…") or stripped.startswith("  ..."):
        return True
    _patterns, words = templates(language)
    size = len(re.sub(r"\s", "", NUMBER.sub("", PATH.sub("", stripped))))  # what is left once fields are out
    if covered(stripped, language) >= min(COVERAGE * size, LONG_ENOUGH) if size < 2 * LONG_ENOUGH else \
            covered(stripped, language) >= COVERAGE * size:
        return True
    # A table row: numbers, and words each of which the program prints (a row name, a column). A short line
    # (4 words at most): numbers, and words that one of the program's texts holds together, not scattered.
    own_words = WORD.findall(NUMBER.sub(" ", PATH.sub(" ", stripped)))
    if len(re.findall(r"\S {2,}\S", stripped)) >= 3:
        return all(w.lower() in words for w in own_words)
    return len(own_words) <= 4 and any({w.lower() for w in own_words} <= text for text in word_sets(language))


def all_sections():
    for name, language in READMES.items():
        for command, lines in sections(REPO / name):
            yield name, language, command, lines


def test_the_readmes_show_commands_and_their_output():
    shown = list(all_sections())
    assert len(shown) >= 20 and sum(1 for *_, lines in shown if lines) >= 20


@pytest.mark.parametrize("doc, language, command, lines",
                         [s for s in all_sections() if s[2] and RUN_EXACTLY.match(s[2])],
                         ids=lambda v: v if isinstance(v, str) and v.count(" ") < 12 else None)
# Compiled at the reader's level (in the command's own process; the suite's XLA flag stays, conftest.py): the
# tour's last digits are the README's.
@pytest.mark.usefixtures("users_compile_in_children")
def test_quick_commands_print_what_the_readme_shows(doc, language, command, lines):
    if "shared/data/mnist" in command and not MNIST_DIR.is_dir():
        pytest.skip("the canonical MNIST is not beside the project")
    words = shlex.split(command)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    while "=" in words[0]:  # LANG=es_ES.UTF-8 jaxintro ...
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", *words[1:]], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    printed = (proc.stdout + proc.stderr).rstrip("\n").splitlines()
    expected = [line for line in lines if line.strip()]
    assert [line for line in printed if line.strip()] == expected, proc.stderr[-2000:]


@pytest.mark.parametrize("doc", list(READMES))
def test_every_shown_line_is_one_the_program_prints(doc):
    language = READMES[doc]
    stale = []
    for command, lines in sections(REPO / doc):
        shown_output = command is not None or (lines and lines[0].startswith("WARNING:"))  # not the layout map
        if not shown_output or (command and RUN_EXACTLY.match(command)):  # those ran above, line for line
            continue
        for line in lines:
            if line.startswith(("Time: ", "Tiempo: ")):  # a list of phases: checked against them just below
                continue
            make = re.match(r'make train ARGS="(.*)"', command or "")
            if make and line == f".venv/bin/jaxintro train {make[1]}":  # make's own echo of the command
                continue
            if not printable(line, language) and not printable(line, "en"):
                stale.append(f"{command}: {line}")
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("doc", list(READMES))
def test_every_time_line_names_the_phases_train_prints(doc):
    """`Time:` is built from a list of phases: its words are the phases `train` measures today, in its order."""
    lines = [line for _c, shown in sections(REPO / doc) for line in shown]
    for language in ("en", "es"):
        phases, head = time_line(language)
        for line in (line for line in lines if line.startswith(head)):
            named = [re.sub(r" [\d.,]+s$", "", part) for part in line[len(head):].split(";")[0].split(", ")]
            assert named == phases, line


def test_the_time_line_is_shown_in_both_languages():
    for language in ("en", "es"):
        head = time_line(language)[1]
        assert any(line.startswith(head) for doc in READMES for _c, shown in sections(REPO / doc) for line in shown)


def time_line(language: str) -> tuple[list[str], str]:
    """The phases `train` names in its `Time:` line, and the line's first word, in `language`."""
    from jaxintro.report import TIME_WORDS
    from jaxintro.i18n import _, set_language

    set_language(language)
    try:
        return [_(word) for word in TIME_WORDS.values()], _("Time: {parts}; {total:.1f}s in all").split("{parts}")[0]
    finally:
        set_language("en")


def test_a_reworded_line_is_caught():
    assert printable("Test accuracy: 97.57% (10000 images)", "en")
    assert not printable("Test accuracy, measured: 97.57% over 10000 images", "en")
    assert not printable("jaxintro train: error: --batch-size must be a whole number from 1 to 1048576; got 0", "en")
    assert printable("  jax          235,146    97.57%      0.75       1.50", "en")
    assert not printable("  jaks          235,146    97.57%      0.75       1.50", "en")
    recipe = ("Speedrun on mnist: 2 epochs, batch 128, Adam warmup-cosine peak 0.005, warm-up 200 steps, label smoothing "
              "0.1{}, program=run; target 98.0% over 8 seeds (p < 0.01)")
    assert printable(recipe.format(""), "en") and not printable(recipe.format(" to targets"), "en")
