"""The long teaching texts of each exercise (statement, hints, docstrings), per language, in `text_<lang>.py`.

They are paragraphs, not messages, so they live as Python dicts beside the code rather than in
the gettext catalog; `tests/test_exercises.py` checks that both languages have every entry.
"""

from __future__ import annotations

import importlib
from types import ModuleType

TEXT_LANGUAGES = ("en", "es")


def text_table(lang: str) -> ModuleType:
    """The module of `lang`'s texts (English for a language without one)."""
    return importlib.import_module(f"jaxintro.exercises.text_{lang if lang in TEXT_LANGUAGES else 'en'}")


def statement(slug: str, lang: str) -> str:
    """What exercise `slug` asks, in `lang`."""
    return text_table(lang).STATEMENTS[slug]


def hints(slug: str, lang: str) -> list[str]:
    """The progressive hints of `slug`, gentlest first."""
    return text_table(lang).HINTS[slug]


def key_hint(slug: str, key: str, lang: str) -> str | None:
    """The hint written for one mistake (a check's key) of `slug`, if there is one."""
    return getattr(text_table(lang), "KEY_HINTS", {}).get(slug, {}).get(key)


def docstrings(slug: str, lang: str) -> dict[str, str]:
    """The learner's functions' docstrings in `lang` (English ones are the solution file's own)."""
    return getattr(text_table(lang), "DOCSTRINGS", {}).get(slug, {})


def solution_comments(lang: str) -> dict[str, str]:
    """English comment -> `lang`'s, for the comments of our solutions (empty for English)."""
    return getattr(text_table(lang), "SOLUTION_COMMENTS", {})


def given_docstrings(lang: str) -> dict[str, str]:
    """English docstring -> `lang`'s, for the code a starter file gives and each solution file's first line (empty for
    English)."""
    return getattr(text_table(lang), "GIVEN", {})
