"""Build hook: compile the gettext catalogs (`.po`, in git) into `.mo` files (not in git) on every install.

Everything else about the package is in pyproject.toml. The hook runs for `pip install .` and for the
editable install of `make install` alike, so a fresh checkout never shows an English-only tour for
want of a compiled catalog. Entries marked fuzzy are left out of the `.mo` (gettext's own rule).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LOCALE_DIR = Path(__file__).parent / "src" / "jaxintro" / "locale"


def compile_catalogs(locale_dir: Path = LOCALE_DIR) -> list[Path]:
    """Write `<lang>/LC_MESSAGES/<domain>.mo` beside each `.po` under `locale_dir`; return the written files."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    written = []
    for po in sorted(locale_dir.glob("*/LC_MESSAGES/*.po")):
        with po.open("rb") as f:
            catalog = read_po(f, locale=po.parents[1].name)
        mo = po.with_suffix(".mo")
        with mo.open("wb") as f:
            write_mo(f, catalog, use_fuzzy=False)
        written.append(mo)
    return written


class BuildPyWithCatalogs(build_py):
    """`build_py` that compiles the catalogs first, so that package data picks up the `.mo` files."""

    def run(self) -> None:
        compile_catalogs()
        super().run()


setup(cmdclass={"build_py": BuildPyWithCatalogs})
