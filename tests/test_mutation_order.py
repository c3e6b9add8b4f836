"""`make mutation`'s order of a mutant's tests: the cheapest next given the fixtures set up, each one time-bounded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

import mutation_order

MEASURED = {
    "calls": {"tests/test_a.py::test_cheap": 0.1, "tests/test_a.py::test_trained_1": 0.1,
              "tests/test_a.py::test_trained_2": 0.2, "tests/test_b.py::test_mid": 1.0,
              "tests/test_b.py::test_on_the_session_run": 0.5, "tests/test_a.py::test_on_the_session_run": 3.5},
    "fixtures": {"tests/test_a.py::trained": 5.0, "tests::session_run": 2.0, "::tmp_path": 0.01},
    "scopes": {"tests/test_a.py::trained": "module", "tests::session_run": "session", "::tmp_path": "function"},
}


@dataclass
class Item:
    """What the order reads of a pytest item: its id, its fixtures' names, its markers."""

    nodeid: str
    fixturenames: tuple[str, ...] = ()
    markers: list[pytest.Mark] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.markers if mark.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator, append: bool = True) -> None:
        self.markers.insert(len(self.markers) if append else 0, marker.mark)


def ordered(tests: list[Item], measured: dict) -> list[str]:
    """The order's test names, each test's fixtures found as `order_and_bound` finds them."""
    uses = {item.nodeid: mutation_order.fixtures_of(item, measured["fixtures"]) for item in tests}
    return [item.nodeid.split("::test_")[1] for item in mutation_order.order(tests, measured, uses)]


def write_measurements(folder, measured: dict) -> None:
    """What mutmut's statistics run leaves: its call times, and the fixtures' that this plugin adds."""
    (folder / mutation_order.CALLS).write_text(json.dumps({"duration_by_test": measured["calls"]}))
    (folder / mutation_order.SECONDS).write_text(json.dumps({"fixtures": measured["fixtures"],
                                                             "scopes": measured["scopes"]}))


def items() -> list[Item]:
    return [Item("tests/test_a.py::test_trained_1", ("trained", "tmp_path")),
            Item("tests/test_a.py::test_trained_2", ("trained",)),
            Item("tests/test_a.py::test_on_the_session_run", ("session_run",)),
            Item("tests/test_a.py::test_cheap", ("tmp_path",), [pytest.mark.timeout(10).mark]),
            Item("tests/test_b.py::test_mid"),
            Item("tests/test_b.py::test_on_the_session_run", ("session_run",))]


def test_a_test_whose_fixture_is_slow_waits_for_the_cheap_ones_and_a_paid_fixture_makes_its_module_cheap():
    order = ordered(items(), MEASURED)
    # The session's run is paid once for both modules; the module's trained run once, by the first of its tests,
    # which the second follows (cheap now) rather than leave the module and train it again on coming back.
    assert order == ["cheap", "mid", "on_the_session_run", "on_the_session_run", "trained_1", "trained_2"]


def test_leaving_a_module_tears_its_fixtures_down_and_coming_back_pays_them_again():
    measured = {"calls": {"tests/test_a.py::test_trained_1": 0.1, "tests/test_a.py::test_trained_2": 6.5,
                          "tests/test_a.py::test_plain": 6.0, "tests/test_b.py::test_mid": 5.5,
                          "tests/test_b.py::test_late": 7.0},
                "fixtures": {"tests/test_a.py::trained": 5.0}, "scopes": {"tests/test_a.py::trained": "module"}}
    tests = [Item("tests/test_a.py::test_trained_1", ("trained",)), Item("tests/test_a.py::test_trained_2", ("trained",)),
             Item("tests/test_a.py::test_plain"), Item("tests/test_b.py::test_mid"), Item("tests/test_b.py::test_late")]
    order = ordered(tests, measured)
    # test_trained_2 would cost 6.5 s right after test_trained_1; once test_b's test_mid has run, test_a's trained
    # run is gone: back in test_a (test_plain), test_trained_2 costs 11.5 s and test_b's test_late comes first.
    assert order == ["trained_1", "mid", "plain", "late", "trained_2"]


@pytest.mark.parametrize("scope, where, order", [
    # conftest's module fixture is made anew in each module: after test_x made it in test_a, test_y (test_b) pays
    # it again (4.5 s), so test_u (4.3 s) comes first.
    ("module", "tests", ["w", "z", "x", "u", "y"]),
    # a function fixture is made for each test: test_q pays it again after test_p (4 s), after test_s (3.5 s).
    ("function", "tests/test_a.py", ["r", "p", "s", "q"]),
], ids=["conftest-module", "function"])
def test_a_fixture_made_again_is_paid_again(scope, where, order):
    calls = ({"tests/test_a.py::test_x": 0.1, "tests/test_b.py::test_y": 0.5, "tests/test_b.py::test_z": 3.0,
              "tests/test_b.py::test_w": 2.0, "tests/test_c.py::test_u": 4.3} if scope == "module" else
             {"tests/test_a.py::test_p": 0.1, "tests/test_a.py::test_q": 1.0, "tests/test_a.py::test_r": 2.0,
              "tests/test_a.py::test_s": 3.5})
    paying = {"x", "y"} if scope == "module" else {"p", "q"}
    measured = {"calls": calls, "fixtures": {f"{where}::made": 4.0 if scope == "module" else 3.0},
                "scopes": {f"{where}::made": scope}}
    tests = [Item(nodeid, ("made",) if nodeid.split("::test_")[1] in paying else ()) for nodeid in calls]
    assert ordered(tests, measured) == order


def test_each_test_is_bounded_by_its_own_cost_unless_it_already_has_a_tighter_bound(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_measurements(tmp_path, MEASURED)
    bounded = items()
    mutation_order.order_and_bound(bounded)
    bounds = {item.nodeid: item.get_closest_marker("timeout").args[0] for item in bounded}
    floor, factor = mutation_order.BOUND_FLOOR, mutation_order.BOUND_FACTOR
    assert bounds["tests/test_a.py::test_trained_1"] == pytest.approx(floor + factor * (0.1 + 5.0 + 0.01))
    assert bounds["tests/test_b.py::test_mid"] == pytest.approx(floor + factor * 1.0)
    assert bounds["tests/test_a.py::test_cheap"] == 10  # its own bound is tighter


def test_without_measurements_the_order_is_left_as_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    left = items()
    mutation_order.order_and_bound(left)
    assert [item.nodeid for item in left] == [item.nodeid for item in items()]
    assert left[0].get_closest_marker("timeout") is None


def test_the_statistics_run_adds_the_fixtures_it_measured_to_what_an_earlier_one_did(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_measurements(tmp_path, MEASURED)
    monkeypatch.setattr(mutation_order, "_fixture_seconds", {"tests/test_c.py::new": 0.3, "tests/test_a.py::trained": 4.0})
    monkeypatch.setattr(mutation_order, "_fixture_scopes", {"tests/test_c.py::new": "module",
                                                            "tests/test_a.py::trained": "module"})
    mutation_order.pytest_sessionfinish(None)
    measured = json.loads((tmp_path / mutation_order.SECONDS).read_text())
    assert measured["fixtures"] == {**MEASURED["fixtures"], "tests/test_c.py::new": 0.3, "tests/test_a.py::trained": 4.0}
    assert measured["scopes"] == {**MEASURED["scopes"], "tests/test_c.py::new": "module"}


def test_only_mutmuts_statistics_run_measures(monkeypatch):
    """tests/conftest.py registers the fixture timer in that run alone: a mutant's run only reads what it wrote."""
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    assert mutation_order.measuring()
    for other in ("", "fail", "jaxintro.lesson.x_accuracy__mutmut_1"):
        monkeypatch.setenv("MUTANT_UNDER_TEST", other)
        assert not mutation_order.measuring()
