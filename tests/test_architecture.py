"""docs/architecture.md stays true: every module it names exists, every module is named, and its rules hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "jaxintro"
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
NAMED = set(re.findall(r"`([\w/]+(?:\.py|/))`", DOC))


def modules() -> set[str]:
    """Every module of the package by its path under src/jaxintro/ (the exercises' reference solutions aside)."""
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "solutions" not in p.parts}


def test_every_module_it_names_exists():
    missing = [name for name in NAMED if not name.startswith(("tests/", "src/")) and "NAME" not in name
               and not (PACKAGE / name).exists()]
    assert not missing, missing
    assert len(NAMED) > 40


def test_every_module_is_named():
    unnamed = sorted(m for m in modules() if m not in NAMED)
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"


def top_level_imports(path: Path) -> set[str]:
    """The jaxintro modules `path` imports when it is imported (not inside functions, not for type checking)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxintro"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("jaxintro"))
    return found


def test_the_lesson_imports_nothing_of_jaxintro():
    assert top_level_imports(PACKAGE / "lesson.py") == set()


def test_the_command_line_imports_only_what_help_needs():
    assert top_level_imports(PACKAGE / "cli.py") <= {"jaxintro", "jaxintro.config", "jaxintro.errors",
                                                      "jaxintro.faults", "jaxintro.i18n"}


def test_foundations_import_no_layer_above_them():
    foundations = {"config", "errors", "i18n", "data", "runs", "faults", "images"}
    for name in foundations:
        above = {m for m in top_level_imports(PACKAGE / f"{name}.py")
                 if m.removeprefix("jaxintro.").split(".")[0] not in foundations | {"jaxintro"}}
        assert not above, (name, above)


def test_an_epoch_is_compiled_in_one_place():
    """`lower(...).compile()` of an epoch only in `Trainer.compile_epoch`: train, bench and profile cannot drift."""
    places = []
    for path in PACKAGE.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "jit_epoch()" in line or ("plan_epoch" in line and "jax.jit" in line):
                places.append(f"{path.relative_to(PACKAGE)}:{number}")
    assert len(places) == 2 and all(p.startswith("train.py") for p in places), places  # compile_epoch's two loops
