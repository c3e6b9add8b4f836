"""The documentation site: every page in both languages, section for section; no link that leads nowhere; and
`mkdocs build --strict` builds both languages offline, a language switch on every page.

mkdocs-static-i18n shows the English page where a Spanish one is missing (a picture needs that fall-back), so
the pairs are checked here, not left to the build. Program output shown in the pages is checked by
tests/test_readme_output.py, their Python blocks by tests/test_docs.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import lru_cache
from types import SimpleNamespace
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from conftest import REPO
from jaxintro.config import OPTIMIZERS, TrainConfig

DOCS = REPO / "docs"
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*(\{[^}]*\})?$", re.M)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def english_pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if not p.name.endswith(".es.md"))


def spanish(page: Path) -> Path:
    return page.with_name(page.name.removesuffix(".md") + ".es.md")


def prose(path: Path) -> str:
    """A page without its fenced code blocks (a `#` comment in a bash block is no heading)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def headings(path: Path) -> list[tuple[int, str]]:
    return [(len(m[1]), m[2]) for m in HEADING.finditer(prose(path))]


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """The ids the site gives a page's headings (Python-Markdown's toc: a repeated slug gets _1, _2, ...; an id given
    with `{#id}` as it is)."""
    seen: dict[str, int] = {}
    for m in HEADING.finditer(prose(path)):
        text, attributes = m[2], m[3] or ""
        if given := re.search(r"#([\w-]+)", attributes):  # attr_list's own id: `## Title {#id}`
            seen[given[1]] = 0
            continue
        plain = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = slugify(plain, "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            slug = f"{slug}_{seen[slug]}"
        seen.setdefault(slug, 0)
    return frozenset(seen)


def test_every_page_has_both_languages_section_for_section():
    pages = english_pages()
    assert len(pages) >= 15, pages
    missing = [p.name for p in pages if not spanish(p).is_file()]
    orphans = [p.name for p in DOCS.glob("*.es.md") if not p.with_name(p.name.replace(".es.md", ".md")).is_file()]
    assert not missing and not orphans, f"no Spanish page for {missing}; no English page for {orphans}"
    for page in pages:  # the same sections at the same depths: a section left untranslated shows here
        levels = [level for level, _ in headings(page)]
        assert levels == [level for level, _ in headings(spanish(page))], f"{page.name}: sections differ"


def broken_links(path: Path) -> list[str]:
    """The links of a page or README that lead nowhere: a missing file, or an anchor its page does not have.

    A Spanish page's link to `x.md` is to `x.es.md`, as the site resolves it."""
    broken = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: outside the project
            continue
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if name and path.name.endswith(".es.md") and linked.suffix == ".md" and spanish(linked).is_file():
            linked = spanish(linked)
        if not linked.exists():
            broken.append(f"{path.name}: {target} (no such file)")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{path.name}: {target} (no such section)")
    return broken


def test_no_link_is_broken():
    documents = [REPO / "README.md", REPO / "README.es.md", *sorted(DOCS.glob("*.md"))]
    broken = [b for document in documents for b in broken_links(document)]
    assert not broken, "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A `flag` section\n")
    page.write_text("[ok](other.md#a-flag-section) [gone](missing.md) [bad](other.md#nowhere)\n")
    assert broken_links(page) == ["page.md: missing.md (no such file)", "page.md: other.md#nowhere (no such section)"]


def test_the_site_builds_both_languages_offline_with_a_language_switch(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in english_pages():
        folder = "" if page.stem == "index" else f"{page.stem}/"
        english, spanish_page = site / folder / "index.html", site / "es" / folder / "index.html"
        for html, lang, other in ((english, "en", "es"), (spanish_page, "es", "en")):
            text = html.read_text(encoding="utf-8")
            assert f'<html lang="{lang}"' in text, html
            assert f'hreflang="{other}"' in text, f"{html}: no switch to {other}"
            # Nothing the page loads comes from another site: no web fonts, no scripts from a CDN.
            assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?://', text), html
            # A list needs a blank line before it in Python-Markdown: without one it is a paragraph's text.
            glued = re.findall(r"<p>(?:(?!</p>).)*\n(?:- |\d+\. )(?:(?!</p>).)*</p>", text, re.S)
            assert not glued, f"{html}: a list rendered as a paragraph: {glued[0][:120]}"
    assert "Introduction to JAX" in (site / "notebook" / "index.html").read_text(encoding="utf-8")
    assert "Introducción a JAX" in (site / "es" / "notebook" / "index.html").read_text(encoding="utf-8")


# Every code span of the exercises' table that the browser lays out on more than one line (a file or function name
# broken mid-word), and whether the table is wider than the page's content column.
TABLE_LAYOUT = """
const table = document.querySelector('.exercise-table table');
const broken = [...table.querySelectorAll('td code')].filter(code => {
  const range = document.createRange();
  range.selectNodeContents(code);
  return range.getClientRects().length > 1;
}).map(code => code.textContent);
const box = table.closest('.md-typeset__scrollwrap') || table.parentElement;
return {broken, overflows: box.scrollWidth > box.clientWidth + 1};
"""


def test_the_exercises_table_reads_whole_names_at_1280_pixels(tmp_path):
    """At 1280 px the content column is about 690 px wide: a file name such as `12_per_example_grads.py` broke
    into two lines of the table; each code span now stays whole, and the table does not scroll."""
    from test_serve import browser_paths, open_browser

    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)], cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    driver = open_browser(*browser_paths())
    try:
        for folder in ("", "es/"):
            driver.get((site / folder / "exercises" / "index.html").as_uri())
            assert driver.execute_script("return window.innerWidth") == 1280
            assert driver.execute_script(TABLE_LAYOUT) == {"broken": [], "overflows": False}, folder
    finally:
        driver.quit()


def test_the_flags_tables_are_the_parsers_in_each_language():
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    for command in ("train", "sweep"):
        english, spanish_table = hooks.flags(command, "en"), hooks.flags(command, "es")
        for table in (english, spanish_table):
            flags = re.findall(r"^\| `(--[\w-]+)`", table, re.M)
            # every flag of the command, in --help's order, --lang last; a flag added to the parser is here too
            assert flags[0] == "--dataset" and flags[-1] == "--lang" and "--validation" in flags, flags
            assert len(flags) == len(set(flags)) >= 25, flags
            # choices and default from the config's table, whatever optimizers it lists
            assert f"`{{{','.join(OPTIMIZERS)}}}` | `{TrainConfig().optimizer}` |" in table
            assert "| `--seed` `SEED` | `0` |" in table  # a default of 0 shown
        assert "| optimizer |" in english and "| optimizador |" in spanish_table  # help in the page's language
        assert spanish_table.startswith("| opción | por defecto | qué hace |")
    assert "| `0.001` | learning rate (peak, with a schedule) |" in hooks.flags("train", "en")  # the default once
    page = lambda name: SimpleNamespace(file=SimpleNamespace(src_uri=name))  # noqa: E731: what the hook reads
    assert hooks.on_page_markdown("{{ flags: sweep }}\n", page("commands.es.md"), None, None).startswith("| opción |")
    assert hooks.on_page_markdown("{{ flags: sweep }}\n", page("commands.md"), None, None).startswith("| flag |")
    from jaxintro.i18n import current_language, set_language

    set_language("es")  # a table leaves the language as it found it, not English
    try:
        hooks.flags("train", "en")
        assert current_language() == "es"
    finally:
        set_language("en")


def structure(text: str) -> list[str]:
    """A page's skeleton: each heading by level, each code block, each table and each list with its row or item count,
    in order (the words left out: they are the translation's)."""
    out: list[str] = []
    kind = None  # the table or list the current line continues
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith("```"):
            for closing in lines:
                if closing.startswith("```"):
                    break
            out.append("code")
            kind = None
        elif heading := re.match(r"(#{1,6}) ", line):
            out.append(f"h{len(heading[1])}")
            kind = None
        elif line.startswith("|") or re.match(r"([-*]|\d+\.) ", line):
            new = "table" if line.startswith("|") else "list"
            if kind != new:
                out.append(f"{new}:0")
                kind = new
            if not re.fullmatch(r"\|[\s:|-]+\|\s*", line):  # a table's separator row is no row
                out[-1] = f"{new}:{int(out[-1].split(':')[1]) + 1}"
        elif not line.strip():
            kind = None if kind == "table" else kind  # a list's items may stand apart; a table ends at a blank
        elif not line.startswith(" "):
            kind = None
    return out


@pytest.mark.parametrize("page", [*english_pages(), REPO / "README.md"], ids=lambda p: p.name)
def test_each_page_and_its_twin_have_the_same_structure(page):
    """The English and Spanish twins: the same headings, code blocks, tables and lists, each table and list as long,
    in the same order: a list of fields or a table one language gains, the other must gain too."""
    twin = REPO / "README.es.md" if page.name == "README.md" else spanish(page)
    assert structure(page.read_text(encoding="utf-8")) == structure(twin.read_text(encoding="utf-8")), twin.name


def test_the_structure_sees_a_list_one_twin_lacks():
    page = "# T\n\nText.\n\n- `a`: one\n- `b`: two\n\n| x | y |\n| --- | --- |\n| 1 | 2 |\n\n```text\n$ run\n```\n"
    assert structure(page) == ["h1", "list:2", "table:2", "code"]
    assert structure(page.replace("- `b`: two\n", "")) != structure(page)
