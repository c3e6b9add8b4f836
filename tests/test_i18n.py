"""Every message a learner reads has a Spanish translation that keeps its placeholders, compiled and chosen by locale."""

from __future__ import annotations

import gettext
import io
import re
import string
import subprocess
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from jaxintro import __version__, i18n

PACKAGE = Path(i18n.__file__).parent
PO = PACKAGE / "locale" / "es" / "LC_MESSAGES" / "jaxintro.po"
MO = PO.with_suffix(".mo")
# %-style placeholders as gettext tools see them (Babel's PYTHON_FORMAT, less the literal "%%").
PERCENT = re.compile(r"%(?:\([\w]*\))?[-#0 +]?(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrs]")


@pytest.fixture(scope="module")
def catalog():
    with PO.open("rb") as f:
        return read_po(f)


@pytest.fixture(scope="module")
def extracted() -> set:
    """Every message marked in the package's source now (with `_`, `N_` or `ngettext`), extracted as `make messages` does."""
    return {message for _, _, message, _, _ in extract_from_dir(str(PACKAGE))}


@pytest.fixture
def english():
    yield
    i18n.set_language("en")


def forms(message) -> list[tuple[str, str]]:
    """(source, translation) pairs of a catalog entry: one, or one per plural form (forms beyond 1 use the plural)."""
    if isinstance(message.id, str):
        return [(message.id, message.string)]
    singular, plural = message.id[:2]
    return [(singular if i == 0 else plural, text) for i, text in enumerate(message.string)]


def placeholders(text: str) -> tuple[list, list]:
    """The `{name:spec}` fields (sorted, so a translation may reorder them) and the %-style placeholders."""
    fields = sorted((name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None)
    return fields, sorted(PERCENT.findall(text.replace("%%", "")))


def test_the_catalog_has_messages(catalog, extracted):
    assert len(extracted) > 100 and len([m for m in catalog if m.id]) > 100


def test_every_marked_message_has_a_spanish_translation(catalog, extracted):
    missing = [m for m in extracted if catalog.get(m) is None]
    assert missing == [], "not in the Spanish catalog: run `make messages`, translate, `make install`"
    untranslated = [m.id for m in (catalog.get(m) for m in extracted)
                    if not all(text for _, text in forms(m))]
    assert untranslated == [], "empty translations"


def test_no_entry_is_fuzzy(catalog):
    # gettext leaves fuzzy entries out of the compiled catalog: the learner would read English.
    assert [m.id for m in catalog if m.id and m.fuzzy] == []


def test_translations_keep_every_placeholder(catalog):
    wrong = [(source, text) for m in catalog if m.id for source, text in forms(m)
             if placeholders(source) != placeholders(text)]
    assert wrong == []
    assert [(m.id, errors) for m, errors in catalog.check()] == []  # Babel's own checkers agree


def test_the_spanish_plural_rule_is_two_forms(catalog):
    assert catalog.num_plurals == 2 and catalog.plural_expr == "(n != 1)"


def test_the_compiled_catalog_is_current(catalog):
    assert MO.is_file(), "no compiled catalog: run `make install` (setup.py compiles the .po files)"
    with MO.open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    stale = []
    for m in catalog:
        if not m.id:
            continue
        if isinstance(m.id, str):
            got = [compiled.gettext(m.id)]
        else:
            got = [compiled.ngettext(m.id[0], m.id[1], n) for n in (1, 2)]
        if got != [text for _, text in forms(m)]:
            stale.append(m.id)
    assert stale == [], "the .mo is older than the .po: run `make install`"


def test_the_template_is_what_make_messages_extracts_today(tmp_path):
    """`make messages` on an unchanged tree changes no byte: the committed template is today's extraction (no message
    added or changed without it), and nothing in it moves from run to run (Babel's time stamp is dropped)."""
    makefile = (PACKAGE.parents[1] / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\nmessages:"):].split("\n\n")[0]
    extract = next(line for line in recipe.splitlines() if "pybabel extract" in line)
    assert "--add-location=file" in recipe and "POT-Creation-Date" in recipe  # the options copied below, and the sed
    out = tmp_path / "jaxintro.pot"
    subprocess.run([str(Path(sys.executable).with_name("pybabel")), "extract", "--project=jaxintro",
                    f"--version={__version__}", "--copyright-holder=the jaxintro authors", "--add-location=file",
                    "--add-comments=TRANSLATORS:", "-o", str(out), "src/jaxintro"], check=True, capture_output=True,
                   cwd=PACKAGE.parents[1])
    fresh = re.sub(r'^"POT-Creation-Date: .*\n', "", out.read_text(encoding="utf-8"), flags=re.M)
    assert "pybabel extract" in extract
    assert fresh == (PACKAGE / "locale" / "jaxintro.pot").read_text(encoding="utf-8"), "run make messages"


def test_messages_are_not_marked_inside_f_strings():
    # Extraction reads tokens, and an f-string is one token: a _() inside it would never reach the catalog.
    found = []
    for path in PACKAGE.rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        for tok in tokens:
            fstring = tok.type == tokenize.STRING and "f" in tok.string.split("'")[0].split('"')[0].lower()
            if fstring and re.search(r"\b(_|N_|ngettext)\(", tok.string):
                found.append(f"{path.name}:{tok.start[0]}")
    assert found == []


def test_the_per_epoch_line_is_a_message_and_reads_spanish(extracted):
    # "Epoch N | Loss: ..." is the lesson's print in English; in Spanish its labels and its numbers are Spanish.
    assert [m for m in extracted if isinstance(m, str) and m.startswith("Epoch {epoch}")]
    from jaxintro.record import EpochMetrics

    row = EpochMetrics(3, 0.25, 0.9123, 0.97571, 0.08, 1e-3, 0.64, 1.0)
    i18n.set_language("en")
    assert row.line(10) == "Epoch   3 | Loss: 0.2500 | Train Acc: 0.9123 | Test Acc: 0.9757 | lr 1.00e-03 | 0.64s"
    i18n.set_language("es")
    try:
        assert row.line(10) == ("Época   3 | Pérdida: 0,2500 | Exact. entren.: 0,9123 | Exact. prueba: 0,9757 | "
                                "lr 1,00e-03 | 0,64s")
    finally:
        i18n.set_language("en")


@pytest.mark.parametrize(("environment", "flag", "expected"), [
    ({"LANG": "es_ES.UTF-8"}, None, "es"),
    ({"LANG": "es_ES.UTF-8"}, "en", "en"),
    ({"LANG": "en_US.UTF-8"}, "es", "es"),
    ({"LC_ALL": "en_GB.UTF-8", "LANG": "es_ES.UTF-8"}, None, "en"),
    ({"LC_MESSAGES": "es_MX.UTF-8", "LANG": "C.UTF-8"}, None, "es"),
    ({"LC_ALL": "", "LANG": "es_AR"}, None, "es"),
    ({"LANG": "fr_FR.UTF-8"}, None, "en"),
    ({"LANG": "C"}, None, "en"),
    ({}, None, "en"),
])
def test_the_language_comes_from_the_flag_then_the_locale(monkeypatch, environment, flag, expected):
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert i18n.resolve_language(flag) == expected


def test_set_language_installs_the_catalog(english):
    assert i18n.set_language("es") == "es"
    assert i18n._("identical") == "idénticos"
    assert [i18n.ngettext("{n} device", "{n} devices", n).format(n=n) for n in (1, 4)] == [
        "1 dispositivo", "4 dispositivos"]
    assert i18n.set_language("en") == "en"
    assert i18n._("identical") == "identical"
    assert i18n.ngettext("{n} device", "{n} devices", 1) == "{n} device"


def test_without_a_catalog_the_language_is_english(monkeypatch, tmp_path, english):
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    assert i18n.set_language("es") == "en"
    assert i18n._("identical") == "identical"


def test_an_error_reads_spanish_on_stderr(tmp_path, monkeypatch, capsys, english):
    # A missing --data-dir: the DataNotFoundError that data.py raises, printed by the CLI after set_language ran.
    from jaxintro.cli import main

    monkeypatch.chdir(tmp_path)
    nowhere = tmp_path / "nowhere"
    argv = ["train", "--dataset", "mnist", "--data-dir", str(nowhere), "--epochs", "1", "--run-dir", "r"]
    assert main(["--lang", "es", *argv]) == 2
    err = capsys.readouterr().err
    assert f"--data-dir {nowhere} no existe (" in err, err
    assert "indica la carpeta que los contiene" in err and "does not exist" not in err, err
    assert main(["--lang", "en", *argv]) == 2  # the same command in English: the message is the source text
    assert f"--data-dir {nowhere} does not exist (" in capsys.readouterr().err


def test_runs_shows_statuses_in_spanish_and_keeps_them_english_in_json(tmp_path, capsys, english):
    # `describe_run`'s status is compared by code (serve, --remove-unfinished): only its display is translated.
    import json

    from jaxintro.cli import main

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text('{"epochs": 2, "dataset": "digits", "model": "jax"}')
    assert main(["--lang", "es", "runs", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0/2   épocas" in out and "vacía (sin checkpoint)" in out, out
    assert main(["--lang", "es", "runs", "--root", str(tmp_path), "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["empty (no checkpoint)"]
    assert main(["--lang", "es", "runs", "--root", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out.startswith("No hay ejecuciones en ")


def test_a_bad_flag_value_reads_spanish_in_one_line(tmp_path, capsys, english):
    # --seeds 2 --loop python: the ConfigError that config.py raises, printed by the CLI in the chosen language.
    from jaxintro.cli import main

    run = tmp_path / "run"
    argv = ["train", "--dataset", "digits", "--seeds", "2", "--loop", "python", "--run-dir", str(run)]
    assert main(["--lang", "es", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not run.exists(), err
    assert err.startswith("jaxintro train: error: varios miembros (--seeds > 1, o un barrido) necesitan --loop scan")
    assert "need --loop scan" not in err, err
    assert main(["--lang", "en", *argv]) == 2
    assert "several members (--seeds > 1, or a sweep) need --loop scan" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "environment"), [
    (["--lang", "es", "train", "--help"], {"LANG": "C.UTF-8"}),
    (["train", "--help"], {"LANG": "es_ES.UTF-8"}),
], ids=["flag", "locale"])
def test_help_reads_spanish(monkeypatch, capsys, english, argv, environment):
    # The parser's help texts are translated as it is built: the language must be chosen before that.
    from jaxintro.cli import main

    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("uso: jaxintro train") and "muestra esta ayuda y termina" in out, out
    assert re.search(r"tamaño de lote global \(por\s+defecto: 128\)", out), out
    assert "global batch size" not in out and "(default:" not in out, out


def test_plots_are_labelled_in_spanish(monkeypatch, tmp_path, english):
    # The words on a PNG are translated when it is drawn: the figure is inspected just before it would be saved.
    from jaxintro import plots

    figures: list = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    rows = [{"epoch": e, "loss": 1 / e, "test_loss": 1.1 / e, "train_accuracy": 0.9, "test_accuracy": 0.8}
            for e in (1, 2)]
    i18n.set_language("es")
    plots.plot_curves(rows, tmp_path / "c.png", title="t")
    plots.plot_confusion(np.eye(3, dtype=int), ["a", "b", "c"], tmp_path / "m.png", title="t")
    (ax_loss, ax_acc), (ax_matrix, colorbar) = figures[0].axes, figures[1].axes
    assert (ax_loss.get_xlabel(), ax_loss.get_ylabel(), ax_acc.get_ylabel()) == ("época", "entropía cruzada",
                                                                                  "exactitud (%)")
    assert [t.get_text() for t in ax_loss.get_legend().get_texts()] == [
        "pérdida de entrenamiento (media de la época)", "pérdida de prueba"]
    assert [t.get_text() for t in ax_acc.get_legend().get_texts()] == ["entrenamiento", "prueba"]
    assert (ax_matrix.get_xlabel(), ax_matrix.get_ylabel(), colorbar.get_ylabel()) == (
        "predicha", "real", "imágenes de prueba")
    for fig in figures:
        plots.plt.close(fig)


def test_train_reads_spanish_and_resumes_under_the_same_flag(tmp_path, capsys, english):
    # `--lang` is typed, like the flags `--resume` refuses, yet it changes nothing in the run: resuming honours it.
    from jaxintro.cli import main

    run = tmp_path / "r"
    assert main(["--lang", "es", "train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Entrenando el MLP jax 64-256-128-10 sobre digits (1437 de entrenamiento"), out
    # The epoch line in Spanish, its numbers as Spanish writes them: a decimal comma, a point between thousands.
    assert re.search(r"^Época +1 \| Pérdida: \d,\d{4} \| Exact\. entren\.: 0,\d{4} \| Exact\. prueba: 0,\d{4} \| "
                     r"lr 1,00e-03 \| \d+,\d\ds$", out, re.M), out
    assert re.search(r"Hecho: exactitud en prueba \d\d,\d\d% tras 1 época, \d+,\ds de entrenamiento \(\d+(\.\d{3})* "
                     r"muestras/s\)", out), out
    assert re.search(r"^Tiempo: preparación \d+,\ds, ", out, re.M), out
    assert main(["--lang", "es", "train", "--resume", str(run), "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Reanudando {run} desde la época 1 hasta la 2"), out
    assert "tras 2 épocas," in out, out
