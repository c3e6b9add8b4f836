"""Under `make mutation`: each mutant's tests in the order that finds a failing one soonest, each bounded in time.

mutmut runs a mutant's tests in a fresh process and stops at the first that fails, so the order sets what a killed
mutant costs. mutmut times only each test's call: a test whose call takes 0.1 s but whose fixture trains a run for
5 s looked cheap and ran first. Its statistics run (`MUTANT_UNDER_TEST=stats`) also times every fixture here
(`test-seconds.json`, beside mutmut's own statistics in mutants/); each mutant then runs first the test that costs
least given the fixtures already set up (a module's fixture is paid once while its tests run one after another).

A test that hangs on a mutant (a lock never released, a wait never answered) fails at a bound set from its cost:
the mutant is killed within seconds, not held until mutmut's own limit (which records no verdict).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterator

import pytest

SECONDS = Path("test-seconds.json")  # relative to mutants/, where mutmut runs the tests
BOUND_FLOOR, BOUND_FACTOR = 30.0, 10.0  # a test's bound: 30 s more than ten times what it cost in the statistics run

_fixture_seconds: dict[str, float] = {}
_fixture_scopes: dict[str, str] = {}
_call_seconds: dict[str, float] = {}


def measuring() -> bool:
    """Whether this process is mutmut's statistics run (the unmutated code, every test once)."""
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


def fixture_key(fixturedef: pytest.FixtureDef) -> str:
    """Where a fixture is defined and its name: "tests/test_serve.py::digits_app" ("tests::" for conftest's)."""
    return f"{fixturedef.baseid}::{fixturedef.argname}"


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
    # pytest sets up a fixture's own fixtures before this hook: the time is this fixture's alone.
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        if measuring():
            key = fixture_key(fixturedef)
            _fixture_seconds[key] = max(_fixture_seconds.get(key, 0.0), time.perf_counter() - start)
            _fixture_scopes[key] = fixturedef.scope


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if measuring() and report.when == "call":
        _call_seconds[report.nodeid] = report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    # mutmut re-runs its statistics for new tests only: what they measured updates what the file holds.
    if measuring():
        measured = json.loads(SECONDS.read_text()) if SECONDS.is_file() else {"calls": {}, "fixtures": {}, "scopes": {}}
        for part, new in zip(("calls", "fixtures", "scopes"), (_call_seconds, _fixture_seconds, _fixture_scopes)):
            measured[part].update(new)
        SECONDS.write_text(json.dumps(measured, indent=1, sort_keys=True))


def fixtures_of(item: pytest.Item, fixtures: dict[str, float]) -> list[str]:
    """The measured fixtures `item` uses, each the definition nearest to it (a module's overrides conftest's)."""
    keys = []
    for name in getattr(item, "fixturenames", ()):
        defined = [key for key in fixtures if key.endswith(f"::{name}") and within(item.nodeid, key[:-len(name) - 2])]
        if defined:
            keys.append(max(defined, key=len))
    return keys


def within(nodeid: str, baseid: str) -> bool:
    """Whether a fixture defined at `baseid` ("" for pytest's own, a folder, a module) reaches the test `nodeid`."""
    return not baseid or nodeid.startswith((f"{baseid}/", f"{baseid}::"))


def order(items: list[pytest.Item], measured: dict) -> list[pytest.Item]:
    """`items`, each next the one costing least given what is set up: session fixtures once, a module's (or a
    class's) while its tests run in a row, a test's own every time."""
    calls, fixtures, scopes = measured["calls"], measured["fixtures"], measured["scopes"]
    uses = {item.nodeid: fixtures_of(item, fixtures) for item in items}
    kept: set[str] = set()  # fixtures set up and still alive
    module = None
    ordered, left = [], list(items)
    while left:
        def cost(item: pytest.Item) -> float:
            same_module = item.nodeid.split("::")[0] == module
            unpaid = [key for key in uses[item.nodeid] if key not in kept or scopes[key] == "function"
                      or (scopes[key] != "session" and not same_module)]
            return calls.get(item.nodeid, 0.0) + sum(fixtures[key] for key in unpaid)

        best = min(left, key=cost)
        left.remove(best)
        ordered.append(best)
        if best.nodeid.split("::")[0] != module:  # pytest tears down the module left, even to come back to it
            module = best.nodeid.split("::")[0]
            kept = {key for key in kept if scopes[key] == "session"}
        kept.update(uses[best.nodeid])
    return ordered


def standalone_seconds(item: pytest.Item, measured: dict) -> float:
    """What `item` costs run alone: its call and every fixture it uses."""
    return measured["calls"].get(item.nodeid, 0.0) + sum(measured["fixtures"][key]
                                                         for key in fixtures_of(item, measured["fixtures"]))


def order_and_bound(items: list[pytest.Item]) -> None:
    """Sort a mutant's tests (`order`) and bound each one's time, if the statistics run has measured them."""
    if not SECONDS.is_file():
        return
    measured = json.loads(SECONDS.read_text())
    items[:] = order(items, measured)
    for item in items:
        bound = BOUND_FLOOR + BOUND_FACTOR * standalone_seconds(item, measured)
        marked = item.get_closest_marker("timeout")
        if marked is None or marked.args[0] > bound:
            item.add_marker(pytest.mark.timeout(bound), append=False)
