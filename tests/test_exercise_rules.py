"""The exercises judged by the rule they teach, and the files that hold no answer: which file appears when, what a
checked file may write, a message read within the time limit, and each rewritten message in both languages.

The catalogue of wrong answers (`tests/exercises_wrong/`, run by `test_exercises.py`) holds the mistakes these rules
catch by their key; here are the rules themselves.
"""

from __future__ import annotations

import json
import math
import site
import time
from pathlib import Path

import numpy as np
import pytest

from jaxintro import i18n
from jaxintro.cli import main
from jaxintro.exercises import progress, wire
from jaxintro.exercises.catalog import _REGION, EXERCISES, SOLUTIONS, by_number
from jaxintro.exercises.learner import Learner, ProberGone
from jaxintro.exercises.runner import check_file, check_in_child
from jaxintro.exercises.sandbox import landlock_abi
from jaxintro.exercises.texts import TEXT_LANGUAGES

WRONG = Path(__file__).parent / "exercises_wrong"


def answer_lines(number: int) -> set[str]:
    """The lines of exercise `number`'s answer (its solution's learner part) that say something: no blank line, no
    comment, no bare `return`."""
    source = (SOLUTIONS / by_number(number).filename).read_text(encoding="utf-8")
    region = "".join(m[0] for m in _REGION.finditer(source))
    return {line.split("#")[0].strip() for line in region.splitlines()
            if line.split("#")[0].strip() not in {"", "return", "# >>> solution", "# <<<"}}


@pytest.mark.parametrize("lang", TEXT_LANGUAGES)
def test_a_starter_holds_another_exercises_answer_only_if_it_appears_after_that_one_passes(lang):
    """No file shows the answer of an exercise the learner has not passed: one whose given code holds two lines of
    another's answer names that one in `builds_on`, and names no exercise whose answer it does not hold."""
    for exercise in EXERCISES:
        starter = {line.split("#")[0].strip() for line in exercise.starter(lang).splitlines()}
        held = {other.number for other in EXERCISES
                if other is not exercise and len(answer_lines(other.number) & starter) >= 2}
        assert held == set(exercise.builds_on), exercise.filename


def test_init_writes_the_open_files_and_a_pass_opens_the_ones_that_build_on_it(tmp_path, capsys):
    folder = tmp_path / "ex"
    assert main(["--lang", "en", "exercises", "init", str(folder)]) == 0
    said = capsys.readouterr().out
    locked = {e.filename for e in EXERCISES if e.builds_on}
    assert {p.name for p in folder.glob("*.py")} == {e.filename for e in EXERCISES} - locked
    assert all(name in said for name in locked)
    # A file not there yet is explained, not created, by `check` and `reset`.
    assert main(["--lang", "en", "exercises", "check", "2", "--dir", str(folder)]) != 0
    assert "appears once that passes (jaxintro exercises check 1)" in capsys.readouterr().err
    assert main(["--lang", "en", "exercises", "reset", "2", "--dir", str(folder)]) != 0
    assert not (folder / "02_forward.py").exists()
    capsys.readouterr()
    assert main(["exercises", "list", "--dir", str(folder), "--json"]) == 0
    states = {e["number"]: e["state"] for e in json.loads(capsys.readouterr().out)["exercises"]}
    assert {n for n, s in states.items() if s == "locked"} == {e.number for e in EXERCISES if e.builds_on}
    # Exercise 1 passes: 02 appears (it builds on 1 alone), 03 waits for 2.
    (folder / "01_init_params.py").write_text(by_number(1).reference(), encoding="utf-8")
    assert main(["--lang", "en", "exercises", "check", "1", "--dir", str(folder)]) == 0
    assert "New: " in capsys.readouterr().out
    assert (folder / "02_forward.py").read_text(encoding="utf-8") == by_number(2).starter("en")
    assert not (folder / "03_loss_fn.py").exists()
    # A second init keeps what is there and names the next exercise, not 01, which passes.
    assert main(["--lang", "en", "exercises", "init", str(folder)]) == 0
    assert "Next: " in (out := capsys.readouterr().out) and "02_forward.py" in out.split("Next: ")[1]


def test_a_progress_tmp_folder_left_in_the_way_changes_nothing(tmp_path):
    (tmp_path / ".progress.tmp").mkdir()
    progress.save(tmp_path, {"init_params": progress.Entry(passed=True, passed_once=True)})
    assert progress.load(tmp_path)["init_params"].passed
    assert (tmp_path / ".progress.tmp").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".progress.json", ".progress.tmp"]


def test_a_checked_file_writes_in_its_folder_only(tmp_path):
    """Nothing into the installed package, the virtual environment (a `.pth` there runs at every start) or any other
    folder: Python's opens are refused by the audit hook everywhere, and where the kernel has Landlock a program the
    file starts is refused too."""
    exercise = by_number(5)
    folder = tmp_path / "ex"
    folder.mkdir()
    tag = f"jaxintro-test-{time.time_ns()}"
    targets = [Path(site.getsitepackages()[0]) / f"{tag}.pth", SOLUTIONS.parent / f"{tag}.py", tmp_path / f"{tag}.txt"]
    text = exercise.reference() + "\n".join([
        "", "import subprocess", "refused = []",
        f"for target in {[str(t) for t in targets]!r}:",
        "    try:", "        open(target, 'w').write('import os\\n')", "    except OSError:", "        refused.append(target)",
        f"subprocess.run(['sh', '-c', 'echo x > {targets[2]}.sh'])",
        "open('mine.txt', 'w').write('in its own folder: fine')", ""])
    (folder / exercise.filename).write_text(text, encoding="utf-8")
    try:
        verdict, = check_in_child([(exercise, folder / exercise.filename)], "en", timeout=60)
        assert verdict.passed, verdict
        assert [t.exists() for t in targets] == [False, False, False]
        if landlock_abi() >= 1:  # the kernel refuses a program the file starts too
            assert not Path(f"{targets[2]}.sh").exists()
        assert (folder / "mine.txt").exists()
    finally:
        for target in (*targets, Path(f"{targets[2]}.sh")):
            target.unlink(missing_ok=True)


def test_an_answer_of_many_arrays_is_read_within_the_time_limit_and_a_garbled_size_is_garbage():
    arrays = {f"a{i}": np.zeros((1, i + 1), np.float32) for i in range(3000)}  # as many shapes as arrays
    message = wire.pack({"value": arrays, "observed": []})
    with pytest.raises(wire.OutOfTime):
        wire.unpack(message, deadline=time.monotonic() + 0.01)

    class Answers:  # a transport whose answer is that message, at once
        def exchange(self, _message: bytes, _deadline: float) -> bytes:
            return message

    learner = Learner(Answers())
    learner.deadline = time.monotonic() + 0.01
    with pytest.raises(ProberGone) as gone:
        learner.ask({"op": "report"})
    assert gone.value.why == "timeout"
    text = json.dumps({"body": {}, "sizes": [math.inf]}).encode()  # "sizes": [Infinity]
    with pytest.raises(wire.Garbled, match="OverflowError"):
        wire.unpack(len(text).to_bytes(8, "big") + text)  # a message's header: its length, then its JSON


# Each message the trial found telling a learner what their mistake was not, rewritten: its key, and a phrase of it in
# English and in Spanish (the test holds both languages to the same file).
REWRITTEN = [
    ("01_split_then_draw_from_key.py", "key_reused", "key-reuse checker", "reutilización de claves"),
    ("01_floor_division.py", "zero_weights", "2 // fan_in is a floor division", "división entera"),
    ("03_logsumexp_by_hand.py", "unstable_log_softmax", "overflows to inf", "desborda a inf"),
    ("03_one_hot_labels.py", "one_hot_labels", "instead of multiplying by a one-hot", "en lugar de multiplicar"),
    ("07_vmap_keywords.py", "vmap_keyword_arguments", "positional arguments only", "argumentos posicionales"),
    ("09_float_of_traced.py", "number_from_traced", "into a Python number", "en un número de Python"),
    ("09_divides_by_its_root.py", "zero_over_zero", "0 / 0 is NaN", "0 / 0 es NaN"),
    ("11_if_key.py", "truth_of_a_key", "compare it with None", "compárala con None"),
    ("13_sorted_by_last_character.py", "layers_out_of_order", "ran out of order", "desordenadas"),
    ("14_milliseconds.py", "milliseconds", "that is milliseconds", "eso son milisegundos"),
    ("14_max_not_mean.py", "max_not_mean", "the slowest call", "la llamada más lenta"),
    ("14_median_not_mean.py", "median_not_mean", "the median", "la mediana"),
    ("15_own_optimizer.py", "optimizer_ignored", "(-0.5 x the gradient): use the optimizer clipped() is given, "
     "chained after the clip, not one built inside", "(-0,5 x el gradiente): usa el optimizador que recibe clipped(), "
     "encadenado después del recorte, no uno creado dentro"),
    # A product or a small norm in the prose, with the language's decimal mark; code (optax.sgd(0.5)) keeps Python's.
    ("13_fori_loop_keys.py", "raised", "was built from a traced value", "se construyó con un valor trazado"),
    ("15_clip_after.py", "clip_after_optimizer", "expected 0.5 x 2 = 1.000", "se esperaba 0,5 x 2 = 1,000"),
    ("12_norm_with_epsilon.py", "tiny_norms_off", "(1.03e-03 where the norm is 2.50e-04)",
     "(1,03e-03 donde la norma es 2,50e-04)"),
    # The right numbers by another method than the statement's: each named by what the program shows.
    ("04_forward_twice.py", "forward_twice", "the forward pass runs twice", "dos veces"),
    ("04_losses_appended.py", "tracer_in_global", "global losses holds a traced value", "global losses"),
    ("07_hand_vectorised.py", "predict_not_mapped", "never calls predict", "nunca llama a predict"),
    ("07_predict_rewritten_for_batches.py", "predict_not_mapped", "x of shape (6, 5)", "x de forma (6, 5)"),
    # The fifth trial's: right on the usual inputs, wrong on the ones the lesson also meets.
    ("02_relu6.py", "large_activations", "relu6 or a clip caps it", "relu6 o un recorte"),
    ("05_cleared_by_multiplying.py", "not_replaced", "whatever it held", "tuviera lo que tuviera"),
    ("06_minus_equals_in_place.py", "mutated_input", "with NumPy arrays at the leaves", "con arrays de NumPy"),
    ("14_result_method.py", "method_not_pytree", "exists on a JAX array only", "solo existe en un array de JAX"),
    ("12_jacobian_of_losses.py", "work_grows_quadratically", "with the square of the batch", "con el cuadrado del lote"),
    ("14_waits_for_the_last.py", "not_each_waited", "it waited for 2 of the 6 results", "esperó a 2 de los 6"),
    ("10_truncated_tails.py", "no_tails", "none of the 16,384 draws", "ninguno de los 16.384"),
    ("07_weights_copied_per_example.py", "weights_mapped", "its own copy of w", "su propia copia de w"),
    # The seventh trial's: a statement's "shaped like xs" meets a sequence of vectors.
    ("08_scalar_carry.py", "vectors", "the shape of one x_t", "la forma de un x_t"),
    # And its messages that named another mistake than the file's, or none.
    ("10_global_key.py", "ignores_key", "must come from the key you are given", "debe salir de la clave"),
    ("10_first_copy_clean.py", "copy_without_noise", "copy 0 is x itself", "la copia 0 es x tal cual"),
    ("11_first_layer_only.py", "one_layer_masked", "one hidden layer got a mask", "una capa oculta recibió"),
    ("12_softmax_over_the_batch_axis.py", "zero_gradients", "every gradient is exactly 0", "exactamente 0"),
    ("04_state_first.py", "returns_out_of_order", "the params in second place", "en segundo lugar"),
    ("06_fixed_rate.py", "lr_ignored", "the step took lr = 0.01", "el paso usó lr = 0.01"),
    ("06_update_only.py", "update_not_params", "the update alone", "la actualización sola"),
    ("01_uniform_not_normal.py", "not_normal", "look uniform", "parecen uniformes"),
    ("05_positions_compared.py", "negative_index", "no row changed", "no cambió ninguna fila"),
    ("15_updates_measured.py", "norm_of_updates", "the norms of the updates", "las normas de las actualizaciones"),
]


@pytest.mark.parametrize(("name", "key", "en", "es"), REWRITTEN, ids=[row[0] for row in REWRITTEN])
def test_a_rewritten_message_names_the_real_mistake_in_both_languages(name, key, en, es, tmp_path):
    exercise = by_number(int(name[:2]))
    path = tmp_path / exercise.filename
    path.write_text(exercise.reference() + "\n\n" + (WRONG / name).read_text(encoding="utf-8"), encoding="utf-8")
    try:
        for lang, phrase in (("en", en), ("es", es)):
            i18n.set_language(lang)
            verdict = check_file(exercise, path)
            assert (verdict.passed, verdict.key) == (False, key), verdict.message
            assert phrase in verdict.message, verdict.message
            assert "take_along_axis" not in verdict.message  # a hint may point, never give the answer's line
    finally:
        i18n.set_language("en")


def test_a_folder_named_relative_to_where_the_command_runs_is_checked(tmp_path, monkeypatch, capsys):
    """The child runs in the files' folder: the path it is sent must not be relative to the command's folder."""
    monkeypatch.chdir(tmp_path)
    assert main(["--lang", "en", "exercises", "init", "my exercises"]) == 0
    Path("my exercises/05_immutable_update.py").write_text(by_number(5).reference(), encoding="utf-8")
    capsys.readouterr()
    assert main(["--lang", "en", "exercises", "check", "5", "--dir", "my exercises"]) == 0, capsys.readouterr()
    assert "PASSED 5" in capsys.readouterr().out


def test_an_exercise_message_writes_numbers_as_the_learners_language_does(tmp_path):
    """Spanish: a decimal comma in every number of a message, the stand-in's costs and an array's values alike (and
    "; " between values, since a comma is the decimal mark there); English as Python writes them."""
    from jaxintro.exercises.checking import numbers

    exercise = by_number(14)
    path = tmp_path / exercise.filename
    path.write_text(exercise.reference() + "\n\n" + (WRONG / "14_milliseconds.py").read_text(encoding="utf-8"))
    try:
        i18n.set_language("es")
        verdict = check_file(exercise, path)
        assert "compila en 0,5 s, luego 0,04 s" in verdict.message and "0.5 s" not in verdict.message
        assert numbers(np.array([35.8312, 1.0, -0.5])) == "[35,831; 1; -0,5]"
        i18n.set_language("en")
        assert "compiles in 0.5 s, then 0.04 s" in check_file(exercise, path).message
        assert numbers(np.array([35.8312, 1.0, -0.5])) == "[35.831, 1, -0.5]"
    finally:
        i18n.set_language("en")


@pytest.mark.parametrize("lang, waits", [("en", "opens after 2, 3"), ("es", "se abre tras 2, 3")])
def test_the_list_says_what_a_closed_file_waits_for_and_keeps_its_columns(lang, waits, tmp_path, capsys):
    folder = tmp_path / "ex"
    assert main(["--lang", lang, "exercises", "init", "--dir", str(folder)]) == 0
    capsys.readouterr()
    assert main(["--lang", lang, "exercises", "list", "--dir", str(folder)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(rows) == len(EXERCISES) and waits in rows[3]
    try:
        i18n.set_language(lang)
        sections = {line.index("  " + i18n._(e.section)) for line, e in zip(rows, EXERCISES)}
    finally:
        i18n.set_language("en")
    assert len(sections) == 1, rows  # every section starts in one column, after the widest state and two spaces


SAME_KEY_EVERYWHERE = '''    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(key, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params[f"layer{i + 1}"] = {"w": w, "b": jnp.zeros(fan_out)}
    return params
'''


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lang, page, folder", [("en", "exercises.md", "exercises"), ("es", "exercises.es.md",
                                                                                    "ejercicios")])
def test_the_pages_sample_session_is_what_the_commands_print_today(lang, page, folder, tmp_path, capsys, monkeypatch):
    """docs/exercises' session, run: init, a first file with one key for every layer, check, a hint, the fix, check,
    the list (its first four rows): the page shows what a learner sees, in each language."""
    monkeypatch.chdir(tmp_path)
    # A JAX user's shell often names a persistent cache, which the checked child may not write: nothing of it shows.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax-cache"))
    printed = []

    def run(*argv: str) -> None:
        main(["--lang", lang, "exercises", *argv])
        printed.append("$ " + " ".join(["jaxintro", "--lang", lang, "exercises", *argv]))
        printed.extend(capsys.readouterr().out.rstrip("\n").split("\n"))

    run("init")
    path = tmp_path / folder / "01_init_params.py"
    text = path.read_text(encoding="utf-8")
    todo, end = text.index("    # TODO"), text.index("raise NotImplementedError") + len("raise NotImplementedError\n")
    path.write_text(text[:todo] + SAME_KEY_EVERYWHERE + text[end:], encoding="utf-8")
    run("check")
    run("hint", "1")
    path.write_text(path.read_text(encoding="utf-8").replace(
        "    params = {}\n    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):\n        w = jax.random."
        "normal(key, ", "    keys = jax.random.split(key, len(sizes) - 1)\n    params = {}\n    for i, (k, fan_in, fan_out) "
        "in enumerate(zip(keys, sizes[:-1], sizes[1:])):\n        w = jax.random.normal(k, "), encoding="utf-8")
    run("check")
    run()
    rows = [i for i, line in enumerate(printed) if line[:4].strip().isdigit()]
    shown = printed[:rows[4]] + ["   ..."] + printed[rows[-1] + 1:]
    text = (Path(__file__).parents[1] / "docs" / page).read_text(encoding="utf-8")
    start = text.index("```text\n$ jaxintro --lang") + len("```text\n")
    assert text[start:text.index("```", start)].rstrip("\n").split("\n") == shown, "\n".join(shown)
