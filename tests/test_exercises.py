"""`jaxintro exercises`: every typical wrong answer fails with the hint it deserves, starters fail,
the child process survives the learner's worst files, progress, hints, solutions, --watch.

The checks of the wrong answers run with the file in this process (`check_file`), since the time
limit is not what they test; the references pass across the boundary, in one child
(`test_exercise_boundary.py`), and the child process is tested on its own, with several files per child.
"""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tokenize
from pathlib import Path

import pytest

from jaxintro import i18n
from jaxintro.cli import main
from jaxintro.exercises import progress
from jaxintro.exercises.catalog import EXERCISES, by_number
from jaxintro.commands.exercises import print_verdict
from jaxintro.exercises.runner import Verdict, check_file, check_in_child
from jaxintro.exercises.texts import TEXT_LANGUAGES, docstrings, hints, statement, text_table

WRONG = Path(__file__).parent / "exercises_wrong"


def wrong_answers() -> list[tuple[Path, int, str]]:
    """(file, exercise number, expected key) of every typical wrong answer: `NN_name.py`, first line `# expect: KEY`."""
    found = []
    for path in sorted(WRONG.glob("*.py")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# expect: "), path.name
        found.append((path, int(path.name[:2]), first.removeprefix("# expect: ").strip()))
    return found


@pytest.fixture(autouse=True)
def english():
    i18n.set_language("en")
    yield
    i18n.set_language("en")


def write(folder: Path, exercise, text: str) -> Path:
    path = folder / exercise.filename
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("path", "number", "key"), wrong_answers(), ids=lambda v: getattr(v, "name", ""))
def test_each_typical_wrong_answer_fails_with_the_hint_it_deserves(path, number, key, tmp_path):
    exercise = by_number(number)
    # The wrong definitions come after the reference's, so they replace them; the given code stays.
    verdict = check_file(exercise, write(tmp_path, exercise, exercise.reference() + "\n\n" + path.read_text()))
    assert (verdict.passed, verdict.key) == (False, key), verdict.message
    assert verdict.message and "\n" not in verdict.message
    # Numbers a learner compares are printed alike: never 16 digits beside 5 (a float's repr beside a format).
    assert not re.search(r"\d\.\d{7,}", verdict.message), verdict.message


def test_every_exercise_has_at_least_three_typical_wrong_answers():
    counts = {e.number: 0 for e in EXERCISES}
    for _path, number, _key in wrong_answers():
        counts[number] += 1
    assert {n: c for n, c in counts.items() if c < 3} == {}


@pytest.mark.parametrize("lang", TEXT_LANGUAGES)
def test_starter_files_fail_every_check(lang, tmp_path):
    for exercise in EXERCISES:
        verdict = check_file(exercise, write(tmp_path, exercise, exercise.starter(lang)))
        assert (verdict.passed, verdict.key) == (False, "not_implemented"), exercise.filename


def test_every_exercise_has_its_texts_in_every_language():
    for exercise in EXERCISES:
        for lang in TEXT_LANGUAGES:
            assert statement(exercise.slug, lang).strip(), (exercise.slug, lang)
            assert len(hints(exercise.slug, lang)) >= 2, (exercise.slug, lang)
        assert len(hints(exercise.slug, "es")) == len(hints(exercise.slug, "en")), exercise.slug
        assert set(docstrings(exercise.slug, "es")) == set(exercise.functions), exercise.slug
        starter = " ".join(exercise.starter("es").split())  # docstrings are wrapped at 100 columns
        assert "Given:" not in starter and "given:" not in starter, exercise.slug  # the given code's too
        for name, doc in docstrings(exercise.slug, "es").items():
            assert f'"""{doc}"""' in starter, (exercise.slug, name)


def test_a_check_speaks_the_learners_language(tmp_path):
    exercise = by_number(2)
    path = write(tmp_path, exercise, exercise.reference() + "\n\n" + (WRONG / "02_relu_on_logits.py").read_text())
    i18n.set_language("es")
    verdict = check_file(exercise, path)
    assert verdict.key == "relu_on_logits" and "última capa" in verdict.message


def test_init_writes_starters_in_the_language_and_never_overwrites(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--lang", "es", "exercises", "init"]) == 0
    first = tmp_path / "ejercicios" / EXERCISES[0].filename
    assert first.read_text(encoding="utf-8") == EXERCISES[0].starter("es")
    first.write_text("# my own work\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["--lang", "es", "exercises", "init"]) == 0
    assert first.read_text(encoding="utf-8") == "# my own work\n"
    assert first.name in capsys.readouterr().out
    assert main(["--lang", "en", "exercises", "init"]) == 0
    assert (tmp_path / "exercises" / EXERCISES[0].filename).read_text() == EXERCISES[0].starter("en")
    capsys.readouterr()
    assert main(["--lang", "es", "exercises"]) == 0  # bare: the list, of the Spanish folder
    out = capsys.readouterr().out
    assert "Ejercicios en ejercicios/: pasan 0 de 15" in out and "sin empezar" in out


@pytest.mark.parametrize("lang, still", [("en", "is still being checked after 1 s"), ("es", "sigue comprobándose")])
def test_the_child_reports_a_loop_that_never_ends_within_the_time_limit(lang, still, tmp_path, monkeypatch, capsys):
    from jaxintro.exercises import runner

    monkeypatch.setattr(runner, "STILL_RUNNING_SECONDS", 1)  # the learner hears of it before the limit, not at it
    exercise = by_number(5)
    path = write(tmp_path, exercise, "while True:\n    pass\n")
    verdict, = check_in_child([(exercise, path)], lang, timeout=3)  # without the limit: never returns
    assert verdict.key == "timeout" and "3 s" in verdict.message
    assert still in capsys.readouterr().err


def test_the_child_reports_a_crash_a_syntax_error_and_a_flood_of_prints(tmp_path):
    raises, broken, chatty = by_number(1), by_number(2), by_number(5)
    items = [(raises, write(tmp_path, raises, "import jax\n\nraise RuntimeError('boom')\n")),
             (broken, write(tmp_path, broken, "import jax\n\ndef forward(params, x)\n    return x\n")),
             (chatty, write(tmp_path, chatty, chatty.reference() + "\nfor i in range(300_000):\n    print(i)\n"))]
    verdicts = {v.number: v for v in check_in_child(items, "en", timeout=60)}
    assert verdicts[1].key == "import_error" and "line 3" in verdicts[1].message and "boom" in verdicts[1].message
    assert verdicts[2].key == "syntax_error" and "line 3" in verdicts[2].message
    assert verdicts[5].passed and verdicts[5].printed > 1_000_000 and verdicts[5].output.startswith("0\n1\n")
    assert all("\n" not in v.message for v in verdicts.values())
    os_exit = write(tmp_path, raises, "import os\nos._exit(3)\n")
    verdict, = check_in_child([(raises, os_exit)], "en", timeout=60)
    assert verdict.key == "crashed" and "exit code 3" in verdict.message and verdict.message.endswith("os._exit?)")
    verdict, = check_in_child([(raises, write(tmp_path, raises, "import os\nos._exit(0)\n"))], "en", timeout=60)
    assert verdict.key == "exited" and "remove the os._exit" in verdict.message


def test_a_crash_after_much_on_stderr_is_explained_by_its_last_line(tmp_path):
    exercise = by_number(5)
    text = 'import os\nos.write(2, b"warning " * 2000 + b"\\n")\nos.write(2, b"the cause, last\\n")\nos._exit(3)\n'
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert verdict.key == "crashed" and verdict.message.endswith("the cause, last"), verdict.message


def test_a_started_program_neither_delays_the_verdict_nor_outlives_it(tmp_path):
    exercise = by_number(5)
    pid_file = tmp_path / "pid"
    text = exercise.reference() + (
        "\nimport subprocess\n"
        f"_p = subprocess.Popen(['sleep', '3600'])\nopen({str(pid_file)!r}, 'w').write(str(_p.pid))\n")
    # A verdict that waited for the program it started would wait an hour, and end at the limit: a time-out, no pass.
    # (A limit of 60 s, not less: on a busy machine the child's start alone, JAX's import, can take seconds.)
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert verdict.passed
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("the learner's sleep outlived the check")


@pytest.mark.parametrize("detach", ["setsid", "double-fork"])
def test_a_detached_process_ends_with_the_check(detach, tmp_path):
    """A process the learner's code moves out of the child's group (`setsid`), or hands to init (a double fork),
    is ended with the check all the same, and cannot hold the verdict pipe open."""
    exercise = by_number(5)
    pid_file = tmp_path / "pid"
    middle = "os.setsid()\n" + ("    if os.fork():\n        os._exit(0)\n" if detach == "double-fork" else "")
    text = exercise.reference() + (
        "\nimport os, time\n"
        "if os.fork() == 0:\n"
        f"    {middle}"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(3600)\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=20)
    assert verdict.passed
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return  # ended and reaped
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the learner's detached process {pid} outlived the check")


def test_bytes_written_onto_the_answers_pipe_decide_nothing(tmp_path):
    exercise = by_number(1)
    # A wrong answer that writes to every file descriptor it can find: garbage, then a forged passing verdict.
    forged = json.dumps({"number": 1, "slug": exercise.slug, "passed": True, "key": None, "message": ""})
    text = exercise.reference() + (
        "\nimport os\nfor _fd in range(3, 64):\n    try:\n"
        f"        os.write(_fd, b'not json\\n' + {forged!r}.encode() + b'\\n')\n"
        "    except OSError:\n        pass\n"
        "def init_params(key, sizes):\n    return {}\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    # It wrote onto the pipe of the answers: garbage, which the checks read as garbage, never as a pass.
    assert (verdict.passed, verdict.key) == (False, "garbled"), verdict
    assert "os.write" in verdict.message
    # A well-formed frame whose answer is not one the checks asked for: garbled too, not a traceback.
    text = ("import os\nfrom jaxintro.exercises import wire\n_m = wire.pack({'callables': 0})\n"
            "for _fd in range(3, 64):\n    try:\n        os.write(_fd, wire.frame_head(_m) + _m)\n"
            "    except OSError:\n        pass\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert (verdict.passed, verdict.key) == (False, "garbled"), verdict
    # A frame of the right shape whose bytes are not a message.
    text = ("import os, struct\nfrom jaxintro.exercises import wire\nfor _fd in range(3, 64):\n    try:\n"
            "        os.write(_fd, wire.MAGIC + struct.pack('>Q', 5) + b'junk!')\n    except OSError:\n        pass\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert (verdict.passed, verdict.key) == (False, "garbled"), verdict


def test_check_list_json_and_a_damaged_progress_file(tmp_path, capsys):
    folder = tmp_path / "ex"
    assert main(["exercises", "init", str(folder)]) == 0
    write(folder, EXERCISES[0], EXERCISES[0].reference())
    capsys.readouterr()
    assert main(["exercises", "check", "--dir", str(folder), "--json"]) == 0  # the first not passed: 1
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["number"], verdict["passed"]) == (1, True)
    assert main(["exercises", "check", "--dir", str(folder)]) == 1  # now exercise 2, a starter
    out = capsys.readouterr().out
    assert "FAILED 2" in out and "[not_implemented]" in out and "hint 2" in out
    (folder / progress.PROGRESS_FILE).write_text("{not json", encoding="utf-8")
    assert main(["exercises", "list", "--dir", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    listed = json.loads(captured.out)
    # Exercise 1 passes, so 02 (which builds on it) is there; 03 waits for 2.
    assert [e["state"] for e in listed["exercises"][:3]] == ["passed", "not_started", "locked"]
    assert listed["next"] == 2 and "unreadable" in captured.err and "Traceback" not in captured.err
    assert progress.load(folder)["init_params"].passed
    assert main(["exercises", "solution", "1", "--dir", str(folder)]) == 0  # it passed: no --force needed
    assert capsys.readouterr().out == EXERCISES[0].reference()


def test_hints_come_one_more_at_a_time_and_solutions_wait_for_a_pass(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "ex"
    main(["exercises", "init", str(folder)])
    capsys.readouterr()
    texts = hints("forward", "en")
    for shown in (*range(1, len(texts) + 1), len(texts)):  # one more each time, then all of them again
        assert main(["exercises", "hint", "2", "--dir", str(folder)]) == 0
        out = capsys.readouterr().out
        assert all((text in out) == (i < shown) for i, text in enumerate(texts))
    assert main(["exercises", "solution", "2", "--dir", str(folder)]) == 2
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("n\n"))
    assert main(["exercises", "solution", "2", "--dir", str(folder), "--force"]) == 1
    assert "def forward" not in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("y\n"))
    assert main(["exercises", "solution", "2", "--dir", str(folder), "--force"]) == 0
    assert "jax.nn.relu(h @ params" in capsys.readouterr().out


def test_hint_without_n_is_for_the_first_exercise_that_does_not_pass(tmp_path, capsys):
    """As `check` without N: after `exercises init` nothing passes, so the first exercise's first hint."""
    folder = tmp_path / "ex"
    main(["exercises", "init", str(folder)])
    capsys.readouterr()
    assert main(["exercises", "hint", "--dir", str(folder)]) == 0
    assert hints(EXERCISES[0].slug, "en")[0] in capsys.readouterr().out
    write(folder, EXERCISES[0], EXERCISES[0].reference())
    assert main(["exercises", "check", "1", "--dir", str(folder)]) == 0  # exercise 1 passes: the next is 2
    capsys.readouterr()
    assert main(["exercises", "hint", "--dir", str(folder)]) == 0
    assert hints(EXERCISES[1].slug, "en")[0] in capsys.readouterr().out


@pytest.mark.parametrize("lang, walk", [("en", "walk them by number"), ("es", "recórrelas por número")])
def test_the_any_depth_message_shows_the_f_string_a_learner_would_write(lang, walk, tmp_path):
    """Not `params[f"layer{{i}}"]`: the message is a value, never formatted again, so it holds single braces."""
    exercise = by_number(13)  # the wrong definition after the reference's, as the wrong answers are checked
    path = write(tmp_path, exercise, exercise.reference() + "\n\n" + (WRONG / "13_leaves_in_string_order.py").read_text())
    i18n.set_language(lang)
    verdict = check_file(exercise, path)
    assert verdict.key == "layers_in_string_order"
    assert f'{walk}, params[f"layer{{i}}"]' in verdict.message and "{{" not in verdict.message


@pytest.mark.parametrize("lang, says", [("en", "which axis to map (0) or that it maps none (None)"),
                                        ("es", "qué eje mapear (0) o que no mapea ninguno (None)")])
def test_a_wrong_in_axes_is_told_what_in_axes_means_not_its_answer(lang, says, tmp_path):
    exercise = by_number(7)
    path = write(tmp_path, exercise, exercise.reference() + "\n\n" + (WRONG / "07_in_axes_all_zero.py").read_text())
    i18n.set_language(lang)
    verdict = check_file(exercise, path)
    assert verdict.key == "in_axes_params_batched" and says in verdict.message
    assert "(None, None, 0)" not in verdict.message  # the answer itself is the learner's to write


def wrong_verdict(number: int, wrong: str, lang: str, tmp_path: Path) -> Verdict:
    """The verdict on the reference with the wrong answer `wrong` (a file of tests/exercises_wrong) after it."""
    exercise = by_number(number)
    path = write(tmp_path, exercise, exercise.reference() + "\n\n" + (WRONG / wrong).read_text())
    i18n.set_language(lang)
    return check_file(exercise, path)


@pytest.mark.parametrize("compare_jit", [
    # jax.jit's decorator form: jax.jit(**options) takes no function, then returns the one that does
    "def compare_jit(f, *args, repeats=10):\n"
    "    return {'nojit': time_call(f, *args, repeats=repeats),\n"
    "            'jit': time_call(jax.jit(keep_unused=False)(f), *args, repeats=repeats)}\n",
    # a jitted f made once more outside the timing (a first look at its output): the timed one is still made once
    "def compare_jit(f, *args, repeats=10):\n"
    "    jax.block_until_ready(jax.jit(f)(*args))\n"
    "    return {'nojit': time_call(f, *args, repeats=repeats),\n"
    "            'jit': time_call(jax.jit(f), *args, repeats=repeats)}\n",
], ids=["decorator-form", "one-wrap-more"])
def test_a_right_compare_jit_written_otherwise_passes(compare_jit, tmp_path):
    """Counting jax.jit's wraps (probe.jits_counted) judges only a wrap for every timed call."""
    exercise = by_number(14)
    verdict = check_file(exercise, write(tmp_path, exercise, exercise.reference() + "\n\n" + compare_jit))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("lang, says, where", [("en", "use jax.lax.cond (jnp.where would compute both", "jnp.where or"),
                                               ("es", "usa jax.lax.cond (jnp.where calcularía las dos", "o jnp.where")])
def test_exercise_9s_python_if_is_told_lax_cond_not_the_where_it_rejects(lang, says, where, tmp_path):
    verdict = wrong_verdict(9, "09_python_if.py", lang, tmp_path)
    assert verdict.key == "python_if_on_traced" and says in verdict.message and where not in verdict.message
    elsewhere = wrong_verdict(2, "02_python_if.py", lang, tmp_path)  # any other exercise keeps both ways
    assert "jax.lax.cond" in elsewhere.message and "jnp.where" in elsewhere.message


@pytest.mark.parametrize("lang, one, both", [
    ("en", "the branch for x < 0 takes the square root of a negative number", "the branches are swapped"),
    ("es", "la rama para x < 0 saca la raíz cuadrada de un número negativo", "las ramas están intercambiadas")])
def test_a_wrong_negative_branch_is_not_called_swapped_branches(lang, one, both, tmp_path):
    verdict = wrong_verdict(9, "09_sqrt_of_negative.py", lang, tmp_path)
    assert verdict.key == "branch_sqrt_of_negative" and one in verdict.message and both not in verdict.message
    swapped = wrong_verdict(9, "09_swapped.py", lang, tmp_path)
    assert swapped.key == "branches_swapped" and both in swapped.message


@pytest.mark.parametrize("lang, says, never", [("en", "split that key into one key per copy", "also split"),
                                               ("es", "divide esa clave en una por copia", "también")])
def test_one_draw_with_the_key_is_not_told_it_split_the_key(lang, says, never, tmp_path):
    for wrong in ("10_one_draw_with_the_key.py", "10_parent_key.py"):
        verdict = wrong_verdict(10, wrong, lang, tmp_path)
        assert verdict.key == "parent_key_used" and says in verdict.message and never not in verdict.message


@pytest.mark.parametrize("number, wrong, en, es", [
    (2, "02_reshape_one_image.py", "take sizes from the arrays (x.shape[0], -1)",
     "toma los tamaños de los propios arrays (x.shape[0], -1)"),
    (3, "03_one_hot_without_classes.py", "needs the number of classes", "necesita el número de clases"),
    (5, "05_one_d_mask.py", "needs a last axis of 1 first, v[:, None]", "necesita antes un último eje de 1"),
    (13, "13_from_layer0.py", "the dictionary has no key 'layer0'", "el diccionario no tiene la clave 'layer0'")])
@pytest.mark.parametrize("lang", ["en", "es"])
def test_a_raw_error_of_jax_or_python_comes_with_what_to_look_at(number, wrong, en, es, lang, tmp_path):
    verdict = wrong_verdict(number, wrong, lang, tmp_path)
    assert verdict.key == "raised" and {"en": en, "es": es}[lang] in verdict.message, verdict.message
    assert "of your file" in verdict.message or "de tu archivo" in verdict.message  # the line is still named


@pytest.mark.parametrize("lang", ["en", "es"])
@pytest.mark.parametrize("number, wrong", [(4, "04_loss_after_step.py"), (9, "09_lost_sign.py"),
                                           (15, "15_norm_leaf_sum.py")])
def test_a_value_and_its_expected_value_are_printed_alike(number, wrong, lang, tmp_path):
    verdict = wrong_verdict(number, wrong, lang, tmp_path)
    decimals = {len(found) for found in re.findall(r"\d[.,](\d+)", verdict.message.split("=", 1)[-1])}
    assert len(decimals) == 1 and decimals <= {4, 5}, verdict.message


def test_watch_checks_again_on_every_save_and_stops_on_sigint(tmp_path):
    folder = tmp_path / "ex"
    main(["exercises", "init", str(folder)])
    exercise = by_number(13)
    # -X faulthandler: should a step never come, SIGABRT makes the child print every thread's stack (below).
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "jaxintro.cli", "--lang", "en", "exercises",
                             "check", "13", "--watch", "--dir", str(folder)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def wait_for(text: str, seconds: float = 90) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=deadline - time.monotonic())
            except queue.Empty:
                break
            if text in line:
                return line
        proc.send_signal(signal.SIGABRT)
        raise AssertionError(f"no line with {text!r} within {seconds} s; where the watcher was:\n"
                             f"{proc.communicate(timeout=30)[1][-6000:]}")

    try:
        assert "[not_implemented]" in wait_for("FAILED 13")
        wait_for("Watching")
        write(folder, exercise, exercise.reference() + "\n\n" + (WRONG / "13_relu_on_logits.py").read_text())
        assert "[relu_on_logits]" in wait_for("FAILED 13")
        write(folder, exercise, exercise.reference())
        wait_for("PASSED 13")
        proc.send_signal(signal.SIGINT)
        wait_for("Stopped watching")
        assert proc.wait(timeout=20) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_init_list_and_hint_do_not_import_jax(tmp_path):
    # Only a check imports JAX (its checks, and the learner's file in the child): the other commands stay light.
    code = ("import sys; from jaxintro.cli import main\n"
            f"folder = {str(tmp_path / 'ex')!r}\n"
            "main(['exercises', 'init', folder]); main(['exercises', 'list', '--dir', folder])\n"
            "main(['exercises', 'hint', '3', '--dir', folder])\n"
            "try:\n    main(['exercises', 'check', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_the_hints_for_a_mistake_exist_in_both_languages_and_name_real_keys():
    expected = {(number, key) for _path, number, key in wrong_answers()}
    tables = {lang: text_table(lang).KEY_HINTS for lang in TEXT_LANGUAGES}
    assert tables["en"].keys() == tables["es"].keys()
    for slug, keys in tables["en"].items():
        assert keys.keys() == tables["es"][slug].keys(), slug
        number = next(e.number for e in EXERCISES if e.slug == slug)
        assert {(number, key) for key in keys} <= expected, slug  # each written for a mistake the catalogue makes


def test_working_from_inside_the_folder_and_reset_keeps_a_backup(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "exercises"
    assert main(["exercises", "init", str(folder)]) == 0
    monkeypatch.chdir(folder / ".")
    (folder / "sub").mkdir()
    for where in (folder, folder / "sub"):  # in the folder, or below it: found by its progress file
        monkeypatch.chdir(where)
        capsys.readouterr()
        assert main(["exercises", "check", "1"]) == 1
        assert "FAILED 1 01_init_params.py [not_implemented]" in capsys.readouterr().out
        assert main(["exercises", "list"]) == 0 and "0 of 15 pass" in capsys.readouterr().out
        assert main(["exercises", "hint", "1"]) == 0
        assert main(["exercises", "solution", "1"]) == 2  # found the folder: refused only because 1 does not pass
        assert "does not pass yet" in capsys.readouterr().err
    assert not (folder / "exercises").exists() and not (folder / "sub" / "exercises").exists()
    mine = folder / EXERCISES[0].filename
    mine.write_text("# my attempt\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["exercises", "reset", "1"]) == 0
    assert "kept as" in capsys.readouterr().out
    assert mine.read_text(encoding="utf-8") == EXERCISES[0].starter("en")
    assert (folder / "01_init_params.backup-1.py").read_text(encoding="utf-8") == "# my attempt\n"
    mine.write_text("# a second attempt\n", encoding="utf-8")
    assert main(["exercises", "reset", "1"]) == 0
    assert (folder / "01_init_params.backup-2.py").read_text(encoding="utf-8") == "# a second attempt\n"
    entries = progress.load(folder)
    assert progress.state(EXERCISES[0], folder, entries) == "not_started"


def test_a_failed_check_shows_what_the_file_printed(tmp_path, capsys):
    exercise = by_number(8)
    verdict = Verdict.failed(exercise, "mismatch", "moving_average(...) = [1], expected [2]")
    verdict.output, verdict.printed = "m = 0.5\nx = 3.0\n", 16
    print_verdict(tmp_path, exercise, verdict, {})
    out = capsys.readouterr().out
    assert "Your file printed:" in out and "  | m = 0.5\n  | x = 3.0\n" in out and "more characters" not in out
    verdict.output = "".join(f"line {i}\n" for i in range(500))[:4000]
    verdict.printed = 10_000
    print_verdict(tmp_path, exercise, verdict, {})
    out = capsys.readouterr().out
    assert "  | line 19\n" in out and "line 20" not in out and "more characters not shown" in out


def test_hint_offers_the_hint_for_the_last_failure_first(tmp_path, capsys):
    exercise = by_number(8)
    folder = tmp_path / "exercises"
    assert main(["exercises", "init", str(folder)]) == 0
    path = folder / exercise.filename
    path.write_text(exercise.reference() + "\n\n" + (WRONG / "08_carry_is_input.py").read_text(), encoding="utf-8")
    entries = progress.load(folder)
    progress.record(entries, exercise, path, False, "carry_is_input")
    progress.save(folder, entries)
    capsys.readouterr()
    assert main(["exercises", "hint", "8", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("For your last failure [carry_is_input]: The carry is what the next step receives")
    assert out[1].startswith("1. lax.scan runs a step function")  # then the first hint: the concept, not the code


def test_what_no_check_fails_is_still_said(tmp_path):
    exercise = by_number(5)
    traced = exercise.reference() + (
        "\n@jax.jit\ndef _debug(a):\n    print(a)\n    return a\n\n_debug(jnp.ones(3))\n"
        "open(__file__ + '.log', 'w').write('x')\n")
    verdict = check_file(exercise, write(tmp_path, exercise, traced))
    assert verdict.passed
    assert any("printed a traced value (JitTracer" in note and "jax.debug.print" in note for note in verdict.notes)
    assert any("05_immutable_update.py.log" in note and "__main__" in note for note in verdict.notes)
    clean = check_file(exercise, write(tmp_path, exercise, exercise.reference()))
    assert clean.passed and clean.notes == []
    import jax

    path = write(tmp_path, by_number(1), by_number(1).reference() + "\n" + (WRONG / "01_float64.py").read_text())
    verdict = check_file(by_number(1), path)
    assert verdict.key == "not_float32" and any("jax_enable_x64" in note for note in verdict.notes)
    assert not jax.config.jax_enable_x64, "the next file is checked in float32 again"


def test_the_solutions_mutants_include_the_wrong_carry_and_the_survivors_list_is_current(tmp_path):
    # tests/exercise_mutants.py (make mutation-exercises) measures how many one-token changes of our solutions the
    # checks catch; here, that it makes the mutants a learner makes, and that every survivor it names still exists.
    import tomllib

    from exercise_mutants import REASONS, SOLUTIONS, mutants

    scan = dict(mutants(SOLUTIONS / "08_scan.py"))
    carry = next(text for mutant_id, text in scan.items() if "tuple element 0 (m) -> x" in mutant_id)
    verdict = check_file(by_number(8), write(tmp_path, by_number(8), carry))
    assert verdict.key == "carry_is_input"
    every = {mutant_id for path in SOLUTIONS.glob("[0-9][0-9]_*.py") for mutant_id, _text in mutants(path)}
    assert set(tomllib.loads(REASONS.read_text(encoding="utf-8"))) <= every


def _words(source: str) -> set[str]:
    """The comments and docstrings of `source`: what a reader reads as prose."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.string for t in tokens if t.type == tokenize.COMMENT or t.string.startswith('"""')}


def test_a_spanish_solution_is_commented_in_spanish(tmp_path, capsys, monkeypatch):
    from jaxintro.exercises.texts import solution_comments

    english = {c for e in EXERCISES for c in re.findall(r"# (.*)\n", e.reference()) if not c.startswith(">>>")}
    assert english == set(solution_comments("es")), "every comment of our solutions has its Spanish words"
    for exercise in EXERCISES:  # and every docstring, the file's first line included
        untranslated = _words(exercise.reference("en")) & _words(exercise.reference("es"))
        assert not untranslated, (exercise.number, untranslated)
    folder = tmp_path / "ejercicios"
    assert main(["--lang", "es", "exercises", "init", str(folder)]) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("s\n"))
    assert main(["--lang", "es", "exercises", "solution", "8", "--dir", str(folder), "--force"]) == 0
    shown = capsys.readouterr().out
    assert "# (el carry para el paso siguiente, la salida de este paso)" in shown and "carry to the next" not in shown


@pytest.mark.parametrize("how", [
    "exec(open(SOLUTION).read())",
    "import importlib.util\n_spec = importlib.util.spec_from_file_location('s', SOLUTION)\n"
    "_m = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_m)\nset_row = _m.set_row",
    "import os\n_fd = os.open(SOLUTION, os.O_RDONLY)\nexec(os.read(_fd, 1 << 20).decode())",
    "import os\n_d = os.open(os.path.dirname(SOLUTION), os.O_RDONLY)\n"
    "exec(os.read(os.open(os.path.basename(SOLUTION), os.O_RDONLY, dir_fd=_d), 1 << 20).decode())",
])
def test_a_file_that_runs_the_shipped_solution_does_not_pass(tmp_path, how):
    """The solutions sit in the package; a file that reads one and runs it passed every check (issue 61, point 10).
    In the child the read is refused, and the verdict says why, whatever the file made of the refusal."""
    from jaxintro.exercises.catalog import SOLUTIONS

    exercise = by_number(5)
    text = f"SOLUTION = {str(SOLUTIONS / exercise.filename)!r}\ntry:\n" + "".join(
        f"    {line}\n" for line in how.splitlines()) + "except PermissionError:\n    pass\n"
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert not verdict.passed and verdict.key == "reads_solution", verdict
    named = "solutions/" if "dir_fd" in how else "05_immutable_update.py"  # the folder is opened first there
    assert f"solution {named}:" in verdict.message and "jaxintro exercises solution 5" in verdict.message
    # The same answer written out in the file is the learner's own: it passes.
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, exercise.reference()))], "en", timeout=60)
    assert verdict.passed


@pytest.mark.parametrize("how", ["cat", "libc"])
def test_no_process_of_the_check_reads_a_solution_where_the_kernel_has_landlock(tmp_path, how):
    """The audit hook sees Python's own opens: a `cat` the file starts, or libc's `open` through `ctypes`, went round it
    and passed (issue 61, point 10). With Landlock the kernel refuses the read to the child and to all it starts;
    without it (another OS, an older kernel) such a file still gets through, as docs/reliability.md says."""
    from jaxintro.exercises.catalog import SOLUTIONS
    from jaxintro.exercises.sandbox import landlock_abi

    exercise = by_number(5)
    solution = str(SOLUTIONS / exercise.filename)
    text = {"cat": f"import subprocess\nexec(subprocess.run(['cat', {solution!r}], capture_output=True).stdout)\n",
            "libc": f"import ctypes, os\n_libc = ctypes.CDLL(None, use_errno=True)\n"
                    f"_fd = _libc.open({solution.encode()!r}, os.O_RDONLY)\n_buf = ctypes.create_string_buffer(1 << 20)\n"
                    f"exec(_buf.raw[:max(_libc.read(_fd, _buf, 1 << 20), 0)])\n"}[how]
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    if landlock_abi() >= 1:
        assert not verdict.passed and verdict.key == "missing_function", verdict  # it read nothing, so ran nothing
    else:
        assert verdict.passed, verdict


def test_the_kernels_refusal_covers_a_link_back_and_leaves_new_temp_files_readable(tmp_path):
    """`refuse_reading` allows every sibling on the path to the folder, never a link that leads back into it, and
    temp files made afterwards stay readable: the folder lies under the temp folder here, as a project cloned to /tmp
    does, where a new temp file would otherwise land in a folder no rule covers."""
    from jaxintro.exercises.sandbox import landlock_abi

    secret = tmp_path / "package" / "solutions"
    secret.mkdir(parents=True)
    (secret / "answer.py").write_text("secret")
    (tmp_path / "package" / "back").symlink_to(secret)
    (tmp_path / "package" / "other.txt").write_text("open")
    code = textwrap.dedent(f"""
        import subprocess, tempfile
        from pathlib import Path
        from jaxintro.exercises.sandbox import refuse_reading
        tempfile.gettempdir()  # chosen before the restriction, as any library may have
        print(refuse_reading(Path({str(secret)!r})))
        for path in ({str(secret / "answer.py")!r}, {str(tmp_path / "package" / "back" / "answer.py")!r},
                     {str(tmp_path / "package" / "other.txt")!r}):
            try:
                print(open(path).read())
            except PermissionError:
                print("refused")
        with tempfile.NamedTemporaryFile("w+") as made:
            made.write("temp")
            made.flush()
            print(open(made.name).read())
        print(subprocess.run(["cat", {str(secret / "answer.py")!r}], capture_output=True, text=True).stdout or "refused")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # the temp folder on the path, as in /tmp
    assert proc.returncode == 0, proc.stderr[-2000:]
    if landlock_abi() >= 1:
        assert proc.stdout.split() == ["True", "refused", "refused", "open", "temp", "refused"]
    else:
        assert proc.stdout.split() == ["False", "secret", "secret", "open", "temp", "secret"]
