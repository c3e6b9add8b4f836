"""The boundary between the checks and the learner's file (issue 61, point 10): the file runs in a child that holds
no check and no verdict, the checks call its functions across two pipes, and what crosses (`wire.py`) is data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxintro.exercises import wire
from jaxintro.exercises.catalog import EXERCISES, by_number
from jaxintro.exercises.learner import InProcess, Learner, ProberGone
from jaxintro.exercises.runner import check_in_child
from test_exercises import english, write  # noqa: F401 (the autouse fixture, English messages, applies here too)


def received(value):
    """`value` as the other side reads it."""
    return wire.unpack(wire.pack({"value": value}))["value"]


def test_what_a_check_sends_and_gets_crosses_as_the_same_data():
    params = {"layer1": {"w": jnp.ones((2, 3)), "b": np.arange(3, dtype=np.float32)}}
    state = optax.adam(1e-3).init(params)
    value = {"params": params, "items": [1, 2.5, "x", None, True], "pair": (np.float32(1.5), jnp.bfloat16(2.0)),
             "key": jax.random.key(3), "state": state, 7: -np.inf}
    got = received(value)
    assert type(got["params"]["layer1"]["w"]) is type(params["layer1"]["w"])  # a JAX array stays one
    assert type(got["params"]["layer1"]["b"]) is np.ndarray and type(got["pair"][0]) is np.float32
    assert got["pair"][1].dtype == jnp.bfloat16 and float(got["pair"][1]) == 2.0
    assert got["items"] == [1, 2.5, "x", None, True] and got[7] == -np.inf and type(got["pair"]) is tuple
    assert jax.random.normal(got["key"]) == jax.random.normal(jax.random.key(3))
    # A named tuple arrives as one of the same name and fields, whose leaves are the same.
    assert type(got["state"][0]).__name__ == "ScaleByAdamState" and got["state"][0]._fields == state[0]._fields
    assert jax.tree.structure(got["state"]) == jax.tree.structure(received(state))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(got["state"]), jax.tree.leaves(state)))
    # A 0-d array stays 0-d, big-endian bytes arrive as their values, float64 is not narrowed to float32.
    edge = received({"scalar": jnp.float32(2.0), "big": np.arange(3, dtype=">i4"), "wide": np.float64(1 / 3)})
    assert edge["scalar"].shape == () and edge["big"].tolist() == [0, 1, 2] and edge["wide"] == 1 / 3
    # What is not numbers stays with the learner, as a Handle: strings, objects, nests too deep.
    held = []
    deep = [1]
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    back = wire.unpack(wire.pack({"v": [np.array(["a"]), object(), deep]}, hold=lambda v: held.append(v) or
                                 len(held) - 1))["v"]
    assert [type(v) for v in back[:2]] == [wire.Handle, wire.Handle] and back[0].kind == "ndarray"
    assert wire.walk(back[2])[0] == wire.Handle(2, "list")


def test_a_message_builds_nothing_but_data():
    """No pickle: a message cannot name a class to build or code to run; anything else is `Garbled`."""
    def message(body: dict, arrays: list[bytes] = ()) -> bytes:
        text = json.dumps({"body": body, "sizes": [len(a) for a in arrays]}).encode()
        return struct.pack(">Q", len(text)) + text + b"".join(arrays)

    assert wire.unpack(message({"v": {"a": 0, "dtype": "float32", "shape": [1], "kind": "numpy"}}, [b"\0" * 4]))
    for bad in ({"v": {"a": 0, "dtype": "object", "shape": [1], "kind": "numpy"}},  # an array of Python objects
                {"v": {"__reduce__": ["os.system", ["id"]]}},  # what pickle would run
                {"v": {"p": "fake_jitted", "spec": None}},  # a prop, on the side that builds none
                {"v": {"a": 0, "dtype": "float32", "shape": [5], "kind": "numpy"}}):  # more than the bytes hold
        with pytest.raises(wire.Garbled):
            wire.unpack(message(bad, [b"\0" * 4]))
    with pytest.raises(wire.Garbled):
        wire.unpack(message({"v": 1})[:-2])
    with pytest.raises(wire.Garbled):
        wire.frame_length(b"not-ours" + bytes(8))
    assert wire.frame_length(wire.MAGIC + struct.pack(">Q", wire.MAX_FRAME)) == wire.MAX_FRAME
    with pytest.raises(wire.Garbled):
        wire.frame_length(wire.MAGIC + struct.pack(">Q", wire.MAX_FRAME + 1))
    for not_data in (object(), np.array([object()])):  # the checker sends data only: anything else is its own bug
        with pytest.raises(TypeError):
            wire.pack({"v": not_data})


def test_a_file_that_patches_the_checks_in_its_own_process_still_fails(tmp_path):
    """The checks ran in the learner's process: a file that replaced them through importlib passed with any answer.
    Now they run in the command's process, and what the file patches is its own copy."""
    exercise = by_number(5)
    text = (
        "import importlib\n"
        "for _name in ('checking', 'checks_puzzles', 'runner'):\n"
        "    _module = importlib.import_module('jaxintro.exercises.' + _name)\n"
        "    _module.close = lambda *a, **k: True\n"
        "    _module.check_immutable_update = lambda ns: None\n"
        "\ndef set_row(a, i, value):\n    return a\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert (verdict.passed, verdict.key) == (False, "mismatch"), verdict


def test_the_process_that_runs_the_file_holds_no_check_and_no_verdict(tmp_path):
    """What the file can reach in its process: no check module, no runner, nothing of the verdict."""
    exercise = by_number(5)
    seen = tmp_path / "seen.json"
    text = exercise.reference() + (
        "\nimport gc, json, sys\n"
        f"json.dump({{'modules': sorted(m for m in sys.modules if m.startswith('jaxintro')),\n"
        "           'verdicts': sorted({type(o).__name__ for o in gc.get_objects()\n"
        "                               if type(o).__name__ in ('Verdict', 'CheckFailed')})},\n"
        f"          open({str(seen)!r}, 'w'))\n")
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert verdict.passed, verdict
    found = json.loads(seen.read_text())
    assert found["verdicts"] == []
    assert not [m for m in found["modules"] if m.startswith(("jaxintro.exercises.check", "jaxintro.exercises.runner"))]
    assert "jaxintro.exercises.wire" in found["modules"]  # it ran in the child, where the probe answers


def test_every_reference_passes_across_the_boundary_and_a_mistake_keeps_its_key(tmp_path):
    """All fifteen references in one child, as `jaxintro exercises check` runs them, then wrong answers whose
    failure is decided from what crosses: a traced `if`, a Python loop's program, a stand-in's counts."""
    items = [(e, write(tmp_path / e.slug, e, e.reference())) for e in EXERCISES
             if (tmp_path / e.slug).mkdir() is None]
    verdicts = check_in_child(items, "en", timeout=120)
    assert [(v.number, v.passed) for v in verdicts] == [(e.number, True) for e in EXERCISES], verdicts
    wrong = Path(__file__).parent / "exercises_wrong"
    cases = {"09_python_if.py": "python_if_on_traced", "07_python_loop.py": "python_loop",
             "14_no_block.py": "no_block_until_ready", "12_grad_of_the_batch_loss.py": "example_not_a_batch"}
    items = []
    for name, _key in cases.items():
        exercise = by_number(int(name[:2]))
        folder = tmp_path / name.removesuffix(".py")
        folder.mkdir()
        items.append((exercise, write(folder, exercise, exercise.reference() + "\n\n" + (wrong / name).read_text())))
    # float64 comes back float64 (the parent's JAX, without x64, would have narrowed it to float32).
    first = by_number(1)
    (tmp_path / "x64").mkdir()
    items.append((first, write(tmp_path / "x64", first, first.reference() + (
        "\nimport jax\njax.config.update('jax_enable_x64', True)\n"))))
    verdicts = check_in_child(items, "en", timeout=120)
    assert [v.key for v in verdicts] == [*cases.values(), "not_float32"], verdicts


def test_a_function_asked_for_again_under_the_same_transformations_is_traced_once(tmp_path):
    """As one `jax.jit` object: the checks ask for `f.vmap().jit()` call after call, and each shape compiles once."""
    path = tmp_path / "f.py"
    path.write_text("traces = []\n\ndef f(x):\n    traces.append(1)\n    return 2 * x\n\n"
                    "def count():\n    return len(traces)\n")
    learner = Learner(InProcess())
    assert learner.load(path)["callables"] == ["count", "f"]
    for _ in range(3):
        assert np.array_equal(learner["f"].vmap().jit()(jnp.ones(3)), 2 * np.ones(3))
    learner["f"].vmap().jit()(jnp.ones(4))  # another shape: traced again
    assert learner["count"]() == 2


class _Replies:
    """A transport that answers every request with the next of `replies` (what a forged frame could hold)."""

    def __init__(self, *replies: dict) -> None:
        self.replies = list(replies)

    def exchange(self, message: bytes, deadline: float) -> bytes:
        return wire.pack(self.replies.pop(0))


@pytest.mark.parametrize("ask, reply", [
    ("load", {"callables": 0}),
    ("load", {"syntax_error": {"line": "3", "message": "bad"}}),
    ("load", {"raised": {"type": "E", "kinds": [1], "message": "", "line": None, "functions": []}}),
    ("report", {"printed": "many", "output": "", "tracer": "", "x64": False, "opened": [], "traced_globals": []}),
    ("report", {"printed": 0, "output": "", "tracer": "", "x64": 0, "opened": [], "traced_globals": []}),
    ("report", {"printed": 0, "output": "", "tracer": "", "x64": False, "opened": [], "traced_globals": [1]}),
    ("call", {"observed": []}),  # neither a value nor what was raised
    ("call", {"value": 1}),  # no word on the props
    ("call", {"value": 1, "observed": []}),  # one prop was sent, none observed
    ("call", {"raised": {"type": "E", "kinds": ["E"], "message": "", "line": "7", "functions": []}, "observed": [{}]}),
    ("primitives", {"value": {"scan": "1"}, "observed": []}),  # a count that is not a number
    ("calls", {"value": [[["5"]]], "observed": []}),  # a shape that is not numbers
])
def test_an_answer_that_is_not_the_one_asked_for_is_garbled_never_a_value(ask, reply, tmp_path):
    """Every answer is read for its shape before a check sees it: a forged one ends the check as `garbled`."""
    def asked(learner: Learner):
        if ask == "load":
            return learner.load(tmp_path / "f.py")
        if ask == "report":
            return learner.report()
        if ask == "primitives":
            return learner["f"].primitive_counts(1)
        if ask == "calls":
            return learner["f"].shapes_seen_by("g", 1)
        prop = wire.Prop("slow_without_jit", {"eager_s": 0.0})
        return learner["f"](prop), prop.observed

    with pytest.raises(ProberGone) as gone:
        asked(Learner(_Replies(reply)))
    assert gone.value.why == "garbled"
    well_formed = {"load": {"callables": ["f"]}, "report": {"printed": 0, "output": "", "tracer": "", "x64": False,
                                                            "opened": [], "traced_globals": ["losses"]},
                   "call": {"value": 1, "observed": [{"runs": [True]}]},
                   "primitives": {"value": {"scan": 1}, "observed": []},
                   "calls": {"value": [[[5]]], "observed": []}}[ask]
    assert asked(Learner(_Replies(well_formed))) == {"load": well_formed, "report": well_formed,
                                                     "call": (1, {"runs": [True]}), "primitives": {"scan": 1},
                                                     "calls": [[(5,)]]}[ask]


def test_the_childs_temp_files_go_with_the_check_even_where_the_temp_folder_is_on_the_path_to_the_solutions(
        tmp_path, monkeypatch):
    """A clone under /tmp puts the temp folder on the path to the solutions, where Landlock leaves a new temp file
    unreadable: the child's temp files then go to a folder of their own, which the killed child cannot remove. The
    check makes it, and removes it, whatever the child does."""
    from jaxintro.exercises.catalog import SOLUTIONS

    temp = SOLUTIONS.parent  # on the path, as /tmp is to a clone there
    before = set(temp.iterdir())
    monkeypatch.setenv("TMPDIR", str(temp))
    exercise = by_number(5)
    text = exercise.reference() + "\nimport tempfile\n_made = tempfile.NamedTemporaryFile(delete=False)\n"
    verdict, = check_in_child([(exercise, write(tmp_path, exercise, text))], "en", timeout=60)
    assert verdict.passed, verdict
    assert set(temp.iterdir()) == before
