"""The language of what a learner reads: GNU gettext catalogs, chosen by `--lang` or the locale."""

from __future__ import annotations

import contextlib
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


def current_language() -> str:
    """The language `set_language` installed last ("en" before any)."""
    return _language


@contextlib.contextmanager
def in_language(flag: str | None):
    """Messages in `flag`'s language inside the block, and in the one installed before it afterwards."""
    previous = current_language()
    set_language(flag)
    try:
        yield
    finally:
        set_language(previous)


# Languages that write a decimal comma and group thousands with a point (78.821 muestras/s, 82,78%; the percent
# sign stays where the messages put it, next to the number, so the catalog's own "{x:.2f}%" reads the same).
DECIMAL_COMMA = frozenset({"es"})
_language = "en"


class _NumberFormatter(string.Formatter):
    """str.format, but a number given a format spec is written as the chosen language writes numbers.

    A value a learner types back (a flag's value like --lr 0.001, a Python literal) is given bare, `{lr}`, or
    formatted before, and stays as Python writes it."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if not format_spec:  # a bare {x} is code-like (a flag's value, a version, a tracer): as Python writes it
            return super().format_field(value, format_spec)
        if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a 0-d array (NumPy's, JAX's): its number
            with contextlib.suppress(Exception):  # a tracer has no number to give
                value = value.item()
        text = super().format_field(value, format_spec)
        if isinstance(value, (bool, str)) or not isinstance(value, numbers.Number):
            return text
        return text.translate(_SWAP_SEPARATORS)


_SWAP_SEPARATORS = str.maketrans({",": ".", ".": ","})
_FORMATTER = _NumberFormatter()


class Localized(str):
    """A message in the chosen language whose `format` writes numbers in that language's way."""

    def format(self, *args: Any, **kwargs: Any) -> str:  # noqa: A003: str's own method, localized
        if decimal_comma():
            return _FORMATTER.vformat(self, args, kwargs)
        return str.format(self, *args, **kwargs)


class Code:
    """A number a learner may type back (a flag's value such as --lr 0.001, a Python literal): in any language it
    is written as Python writes it, e.g. `_("Best: lr {lr:g}").format(lr=Code(lr))`."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __format__(self, format_spec: str) -> str:
        return format(self.value, format_spec)


def format_duration(seconds: float) -> str:
    """A time as a learner reads it: seconds to 2 decimals ("1.41s"), or milliseconds under a second ("9.2ms", a
    run an accelerator finishes in a blink), in the chosen language's numbers."""
    if seconds < 1:
        return format_number(seconds * 1e3, ".1f") + "ms"
    return format_number(seconds, ".2f") + "s"


def decimal_comma() -> bool:
    """Whether the chosen language writes a decimal comma (0,9757)."""
    return _language in DECIMAL_COMMA


def list_separator() -> str:
    """What goes between the numbers of a list: "; " where a comma is the decimal mark (0,55; 0,09), else ", "."""
    return "; " if decimal_comma() else ", "


def format_number(value: Any, spec: str) -> str:
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
