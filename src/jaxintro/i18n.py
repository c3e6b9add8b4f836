"""The language of what a learner reads: GNU gettext catalogs, chosen by `--lang` or the locale."""

from __future__ import annotations

import gettext
import numbers
import os
import string
from pathlib import Path
from typing import Any

DOMAIN = "jaxintro"
LOCALE_DIR = Path(__file__).parent / "locale"
LANGUAGES = ("en", "es")

_translation: gettext.NullTranslations = gettext.NullTranslations()


def resolve_language(flag: str | None = None) -> str:
    """`--lang` when given, else the first of LC_ALL, LC_MESSAGES, LANG that is set: `es` or `en`."""
    if flag:
        return flag
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name)
        if value:  # e.g. es_ES.UTF-8: its language is the part before "_"; unknown ones read English
            language = value.split("_")[0].split(".")[0].lower()
            return language if language in LANGUAGES else "en"
    return "en"


def set_language(flag: str | None = None) -> str:
    """Install the catalog of `flag` (or of the locale); English when no catalog is found. Return the language used."""
    global _translation
    lang = resolve_language(flag)
    global _language
    _translation = gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang], fallback=True)
    # English is the messages' own language: it needs no catalog, and a missing one means English.
    _language = lang if isinstance(_translation, gettext.GNUTranslations) else "en"
    return _language


# Languages that write a decimal comma and group thousands with a point (CLDR: 78.821 muestras/s, 82,78 %).
DECIMAL_COMMA = frozenset({"es"})
_language = "en"


class _NumberFormatter(string.Formatter):
    """str.format, but a number given a format spec is written as the chosen language writes numbers."""

    def format_field(self, value: Any, format_spec: str) -> str:
        text = super().format_field(value, format_spec)
        if not format_spec or isinstance(value, (bool, str)) or not isinstance(value, (int, float, numbers.Number)):
            return text  # a bare {x} is code-like (a flag's value, a version): as Python writes it
        text = text.translate(_SWAP_SEPARATORS)
        return text[:-1] + " %" if format_spec.endswith("%") and text.endswith("%") else text


_SWAP_SEPARATORS = str.maketrans({",": ".", ".": ","})
_FORMATTER = _NumberFormatter()


class Localized(str):
    """A message in the chosen language whose `format` writes numbers in that language's way."""

    def format(self, *args: Any, **kwargs: Any) -> str:  # noqa: A003: str's own method, localized
        if _language in DECIMAL_COMMA:
            return _FORMATTER.vformat(self, args, kwargs)
        return str.format(self, *args, **kwargs)


def number(value: Any, spec: str) -> str:
    """`format(value, spec)` as the chosen language writes numbers (0.9757 in English, 0,9757 in Spanish)."""
    return Localized("{:" + spec + "}").format(value)


def _(message: str) -> str:
    """`message` in the chosen language."""
    return Localized(_translation.gettext(message))


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form for `n`, by the chosen language's plural rule."""
    return Localized(_translation.ngettext(singular, plural, n))


def N_(message: str) -> str:
    """Mark `message` for extraction without translating it yet: it is translated with `_` where it is shown."""
    return message


def printable(text: object, keep: str = "") -> str:
    """`text` safe to show on a terminal: control and format characters as Python escapes (\\x1b, \\n, \\u202e),
    but those in `keep`.

    A folder name or a run's dataset comes from whoever made the run folder; printed raw, an escape sequence
    in it could retitle or repaint the learner's terminal, or write to its clipboard (OSC 52).
    """
    return "".join(ch if ch.isprintable() or ch in keep else ascii(ch)[1:-1] for ch in str(text))


class EscapedStream:
    """A text stream that writes everything through `printable` (lines, tabs and carriage returns kept): what a
    command prints reaches the terminal escaped, whichever run folder's words it holds."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, keep="\n\r\t"))
        return len(text)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding, buffer: the stream's own
        return getattr(self.stream, name)
