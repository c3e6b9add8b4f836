"""What a new user met on a fresh clone: each papercut as the user typed it, and the answer the program gives now."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import synthetic_dataset
from jaxintro import api, serve
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.errors import DataError
from jaxintro.images import load_image
from jaxintro.train import Trainer

ROOT = Path(__file__).resolve().parent.parent


def error_of(capsys, argv: list[str]) -> tuple[int, str]:
    """The exit code and stderr of `jaxintro ARGV` run in this process (argparse's refusals exit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_a_port_out_of_range_is_a_one_line_error(capsys):
    code, err = error_of(capsys, ["serve", "runs/none", "--port", "99999"])
    assert code == 2 and "expected a port from 0 to 65535, got 99999" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["tour", "--lang", "es", "--list"], ["--lang", "es", "tour", "--list"]],
                         ids=["after-the-command", "before-the-command"])
def test_lang_is_understood_before_or_after_the_command(capsys, argv):
    assert main(argv) == 0
    assert "Los arrays de jnp" in capsys.readouterr().out


def test_a_flag_after_the_command_does_not_count_as_typed_for_resume(tmp_path, capsys):
    # `--lang` typed after `train --resume` is honoured like any reporting flag, not refused as a config change.
    run = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--epochs", "2", "--lang", "es"]) == 0
    assert "Reanudando" in capsys.readouterr().out


def test_spanish_errors_are_spanish_from_end_to_end(capsys):
    code, err = error_of(capsys, ["--lang", "es", "train", "--batch-size", "0"])
    assert code == 2 and err.startswith("jaxintro train: error: argumento --batch-size: se esperaba un entero")
    code, err = error_of(capsys, ["train", "--lang", "es", "--model", "foo"])
    assert "opción no válida: 'foo' (elige entre" in err
    code, err = error_of(capsys, ["--lang", "es", "sweep", "--bogus"])
    assert "argumentos no reconocidos: --bogus" in err and "unrecognized" not in err


def test_bare_jaxintro_lists_the_commands(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "the following arguments are required" not in err
    for command in ("train", "sweep", "evaluate", "serve", "tour"):
        assert f"\n    {command} " in err


def test_profile_steps_are_bounded_before_anything_starts(tmp_path, capsys, monkeypatch):
    from jaxintro import runtime

    def started(**kwargs):
        raise AssertionError("profile went on to start JAX")

    monkeypatch.setattr(runtime, "configure_jax", started)
    code, err = error_of(capsys, ["profile", "--steps", "100000", "--dataset", "digits", "--out", str(tmp_path / "p")])
    assert code == 2 and "--steps 100000 is more than 1000" in err and not (tmp_path / "p").exists()


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--lr", "-1,1e-3"], "--lr must be a finite number in (0, 1e+12]; got -1.0"),
    (["sweep", "--lr=-1,1e-3"], "--lr must be a finite number in (0, 1e+12]; got -1.0"),
    (["train", "--lr", "-1e-3"], "--lr must be a finite number in (0, 1e+12]; got -0.001"),
    (["sweep", "--weight-decay", "-.5,0.1", "--optimizer", "adamw"], "--weight-decay must be a finite number"),
])
def test_a_negative_value_is_read_as_a_value(tmp_path, capsys, argv, message):
    code, err = error_of(capsys, [*argv, "--dataset", "digits", "--run-dir", str(tmp_path / "r")])
    assert code == 2 and message in err and "expected one argument" not in err


def test_resume_names_one_refused_flag_in_the_singular(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 0
    code, err = error_of(capsys, ["train", "--resume", str(run), "--lr", "0.1"])
    assert code == 2 and "cannot honour --lr; drop it, or start a new run with it" in err
    code, err = error_of(capsys, ["train", "--resume", str(run), "--lr", "0.1", "--seed", "3"])
    assert "cannot honour --lr, --seed; drop them" in err


@pytest.fixture(scope="module")
def digits_app(digits_run) -> serve.App:
    return serve.load_app(digits_run)


def test_the_api_refuses_blank_pixels_as_it_refuses_a_blank_image(digits_app):
    blank = json.dumps({"pixels": [0.0] * 64}).encode()
    with pytest.raises(api.ApiError, match="no ink found"):
        api.parse_predict_request(blank, 64)
    faint = json.dumps({"pixels": [0.05] * 64}).encode()  # uniform and faint: still no digit
    with pytest.raises(api.ApiError, match="no ink found"):
        api.parse_predict_request(faint, 64)
    with pytest.raises(DataError, match="no ink found"):
        load_image(blank_png(), (8, 8))
    stroke = [0.0] * 64
    stroke[27] = stroke[35] = 1.0
    assert api.parse_predict_request(json.dumps({"pixels": stroke}).encode(), 64)[0] == "pixels"


def blank_png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (28, 28), 255).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_unreadable_image_names_no_python_object(digits_app):
    body = json.dumps({"image": "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()})
    kind, raw = api.parse_predict_request(body.encode(), 64)
    with pytest.raises(api.ApiError) as caught:
        digits_app.predict(kind, raw)
    message = str(caught.value)
    assert "not a readable image (not a PNG or JPEG image)" in message
    assert "object at 0x" not in message and "BytesIO" not in message


def test_the_time_line_names_the_initialisation(tmp_path, capsys):
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--seeds", "2", "--run-dir", str(tmp_path / "r"),
                 "--json"]) == 0
    out = capsys.readouterr().out
    times = json.loads(out.strip().splitlines()[-1])["time_breakdown"]
    assert times["init"] > 0 and sum(v for k, v in times.items() if k != "total") == pytest.approx(times["total"])
    assert ", init " in next(line for line in out.splitlines() if line.startswith("Time: "))


def test_members_start_exactly_where_their_single_runs_start():
    # One by one with the single run's init (no vmap), then stacked: member k's start is `--seed k`'s, bit for bit.
    data = synthetic_dataset(256, 64)
    config = TrainConfig(dataset="digits", seeds=3, seed=7, hidden=(16,), batch_size=32)
    stacked = Trainer.create(config, data).init_state()
    for k in range(3):
        single = Trainer.create(TrainConfig(dataset="digits", seed=7 + k, hidden=(16,), batch_size=32), data)
        own = single.init_state()
        for a, b in zip(jax.tree.leaves(stacked.params), jax.tree.leaves(own.params)):
            np.testing.assert_array_equal(np.asarray(a)[k], np.asarray(b))
        np.testing.assert_array_equal(jax.random.key_data(stacked.key)[k], jax.random.key_data(own.key))


def test_one_model_on_one_device_compiles_no_collective():
    data = synthetic_dataset(256, 64)
    trainer = Trainer.create(TrainConfig(dataset="digits", hidden=(16,), batch_size=32), data)
    state, (x, y), _ = trainer.place(trainer.init_state(), data)
    hlo = trainer.lower_epoch(state, (x, y)).compile().as_text()
    assert "all-reduce" not in hlo and "dot" in hlo


def test_a_verified_data_dir_is_remembered_for_later_commands(mnist_dir, tmp_path, monkeypatch):
    first = load_dataset("mnist", mnist_dir)
    # A later command without --data-dir finds the same verified files, with no fallback and no download.
    later = load_dataset("auto", download=False)
    assert later.name == "mnist" and Path(later.source).resolve() == Path(first.source).resolve()
    np.testing.assert_array_equal(later.y_test, first.y_test)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-cache"))  # another user's cache knows nothing
    with pytest.raises(DataError):
        load_dataset("mnist", download=False)


def test_the_offline_warning_gives_its_fix_once(recwarn):
    assert load_dataset("auto").name == "digits"  # the mirrors are unreachable in tests
    message = str(next(w.message for w in recwarn if "MNIST is not available" in str(w.message)))
    assert message.count("--data-dir") == 1 and message.count("internet") == 1


@pytest.mark.parametrize("backend, trims", [("cpu", 1), ("tpu", 0), ("gpu", 0)])
def test_freed_heap_pages_are_returned_only_where_the_model_lives_in_host_memory(monkeypatch, backend, trims):
    """On a CPU a trim returns the compiler's and Orbax's garbage; on an accelerator it walks the runtime's heap
    (1.1 s of a `train` on a TPU v5e) for a few MB that 14 GB of it does not notice."""
    import ctypes

    from jaxintro import runtime

    calls = []

    class Process:
        def malloc_trim(self, pad):
            calls.append(pad)

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Process())
    monkeypatch.setattr(runtime.jax, "default_backend", lambda: backend)
    runtime.release_free_memory()
    assert len(calls) == trims


@pytest.mark.parametrize(("lang", "said", "see"), [("en", "did you mean --data-dir", "(see jaxintro train --help)"),
                                                 ("es", "¿quisiste decir --data-dir", "(consulta jaxintro train --help)")])
def test_a_mistyped_flag_is_answered_with_the_commands_closest_flags_and_its_own_help(lang, said, see, capsys):
    code, err = error_of(capsys, ["--lang", lang, "train", "--data_dir", "x"])
    assert code == 2 and err.startswith("jaxintro train: error: ") and said in err and see in err
    # A subcommand's subcommand answers for its own flags; a flag like none has no suggestion.
    code, err = error_of(capsys, ["--lang", lang, "exercises", "check", "--timout", "3"])
    assert code == 2 and "--timeout?" in err and "jaxintro exercises check --help" in err
    code, err = error_of(capsys, ["--lang", lang, "train", "--zzz"])
    assert code == 2 and "--zzz" in err and "--data-dir" not in err


@pytest.mark.parametrize("page", ["docs/serve.md", "docs/serve.es.md"])
def test_every_documented_post_to_the_api_sends_json(page):
    """`curl -d` alone sends a form, which the API refuses (415): every example that posts names the JSON type."""
    posts = [line for line in (ROOT / page).read_text(encoding="utf-8").splitlines()
             if line.startswith("curl") and " -d " in line]
    assert posts, page
    assert all('-H "Content-Type: application/json"' in line for line in posts), posts


def test_a_check_finds_jaxintro_and_jax_where_its_command_found_them(tmp_path):
    """A Python that holds neither, given both by PYTHONPATH (an HPC `module load`, a TPU machine's JAX): the child
    that runs the learner's file finds them as its command did, and the file is judged, not told it crashed."""
    import site
    import subprocess
    import sys

    from jaxintro.exercises.catalog import by_number

    bare = Path(sys.base_prefix) / "bin" / "python3"
    if subprocess.run([bare, "-I", "-c", "import jax"], capture_output=True).returncode == 0:
        pytest.skip("the base interpreter holds JAX itself")
    exercise = by_number(1)
    folder = tmp_path / "exercises"
    folder.mkdir()
    (folder / exercise.filename).write_text(exercise.reference())
    paths = [str(Path(__file__).parents[1] / "src"), *site.getsitepackages()]
    done = subprocess.run([bare, "-m", "jaxintro.cli", "exercises", "check", "1", "--dir", str(folder)],
                          capture_output=True, text=True, cwd=folder, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                                        "PYTHONPATH": ":".join(paths)})
    assert done.returncode == 0 and "No module named" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("lang, said", [("en", "does not exist"), ("es", "no existe")])
def test_a_run_folder_that_does_not_exist_is_said_so(lang, said, tmp_path, capsys):
    for command in (["evaluate"], ["predict"], ["train", "--resume"]):
        extra = [str(tmp_path / "a.png")] if command == ["predict"] else []
        assert main(["--lang", lang, *command, str(tmp_path / "no-such-run"), *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and "checkpoints/" not in err, err


def test_predict_says_what_its_run_dir_and_images_are(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = capsys.readouterr().out
    assert "a run folder of `jaxintro train`" in out and "PNG or JPEG files of one digit each" in out


def test_a_module_imported_in_the_background_runs_once_and_a_failure_is_left_to_the_main_import(
        tmp_path, monkeypatch, capsys):
    """`runtime.import_in_background` (Orbax and matplotlib in `train`): the main thread's `import` then finds the
    module the thread loaded, executed once; one that fails prints nothing from the thread, and the main thread's
    own import raises its error where the command can say it in its own words."""
    import builtins
    import threading

    from jaxintro.runtime import import_in_background

    started = threading.Event()  # the thread holds the module's import lock once its code runs
    monkeypatch.setattr(builtins, "bg_started", started, raising=False)
    monkeypatch.setattr(builtins, "bg_runs", [], raising=False)
    (tmp_path / "bg_counted.py").write_text("import builtins, threading, time\nbuiltins.bg_started.set()\n"
                                             "time.sleep(0.2)\nbuiltins.bg_runs.append(threading.current_thread().name)\n")
    (tmp_path / "bg_broken.py").write_text("raise RuntimeError('no such library')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    uncaught = []  # what a thread's uncaught exception would print (a traceback in the middle of the epochs)
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    for name in ("bg_counted", "bg_broken"):
        monkeypatch.setitem(sys.modules, name, None)  # restored (removed) after the test
        del sys.modules[name]
        import_in_background(name)
    assert started.wait(10)
    import bg_counted  # noqa: F401  waits for the thread's import, which holds the module's lock

    assert builtins.bg_runs == ["import-bg_counted"]  # once, in the thread
    for thread in threading.enumerate():
        if thread.name.startswith("import-bg_"):
            thread.join()
    assert uncaught == [] and capsys.readouterr().err == ""
    with pytest.raises(RuntimeError, match="no such library"):
        import bg_broken  # noqa: F401
