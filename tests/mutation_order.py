"""Under `make mutation`: each mutant's tests in the order that finds a failing one soonest, each bounded in time.

mutmut runs a mutant's tests in a fresh process and stops at the first that fails, so the order sets what a killed
mutant costs. mutmut times only each test's call (`mutmut-stats.json`): a test whose call takes 0.1 s but whose
fixture trains a run for 5 s looked cheap and ran first. In its statistics run (`MUTANT_UNDER_TEST=stats`) this
plugin times every fixture too (`test-seconds.json`, beside mutmut's statistics in mutants/); each mutant then runs
first the test that costs least given the fixtures already set up (a module's fixture is paid once while its tests
run one after another).

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
CALLS = Path("mutmut-stats.json")  # mutmut's own: each test's call, in seconds ("duration_by_test")
BOUND_FLOOR, BOUND_FACTOR = 30.0, 10.0  # a test's bound: 30 s more than ten times what it cost in the statistics run

_fixture_seconds: dict[str, float] = {}
_fixture_scopes: dict[str, str] = {}


def measuring() -> bool:
    """Whether this process is mutmut's statistics run (the unmutated code, every test once): the one in which
    tests/conftest.py registers this module's hooks."""
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
        key = fixture_key(fixturedef)
        _fixture_seconds[key] = max(_fixture_seconds.get(key, 0.0), time.perf_counter() - start)
        _fixture_scopes[key] = fixturedef.scope


def pytest_sessionfinish(session: pytest.Session) -> None:
    # mutmut re-runs its statistics for new tests only: what they measured updates what the file holds.
    measured = json.loads(SECONDS.read_text()) if SECONDS.is_file() else {"fixtures": {}, "scopes": {}}
    measured["fixtures"].update(_fixture_seconds)
    measured["scopes"].update(_fixture_scopes)
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


def order(items: list[pytest.Item], measured: dict, uses: dict[str, list[str]]) -> list[pytest.Item]:
    """`items`, each next the one costing least given what is set up: session fixtures once, a module's (or a
    class's) while its tests run in a row, a test's own every time. `uses`: each test's fixtures (`fixtures_of`)."""
    calls, fixtures, scopes = measured["calls"], measured["fixtures"], measured["scopes"]
    kept: set[str] = set()  # session and module fixtures set up and still alive
    module = None
    ordered, left = [], list(items)
    while left:
        def cost(item: pytest.Item) -> float:
            same_module = item.nodeid.split("::")[0] == module
            unpaid = [key for key in uses[item.nodeid]
                      if key not in kept or (scopes[key] != "session" and not same_module)]
            return calls.get(item.nodeid, 0.0) + sum(fixtures[key] for key in unpaid)

        best = min(left, key=cost)
        left.remove(best)
        ordered.append(best)
        if best.nodeid.split("::")[0] != module:  # pytest tears down the module left, even to come back to it
            module = best.nodeid.split("::")[0]
            kept = {key for key in kept if scopes[key] == "session"}
        kept.update(key for key in uses[best.nodeid] if scopes[key] != "function")
    return ordered


def order_and_bound(items: list[pytest.Item]) -> None:
    """Sort a mutant's tests (`order`) and bound each one's time (its call and every fixture it uses, alone), if
    the statistics run has measured them."""
    if not (SECONDS.is_file() and CALLS.is_file()):
        return
    measured = {"calls": json.loads(CALLS.read_text())["duration_by_test"], **json.loads(SECONDS.read_text())}
    uses = {item.nodeid: fixtures_of(item, measured["fixtures"]) for item in items}
    items[:] = order(items, measured, uses)
    for item in items:
        alone = measured["calls"].get(item.nodeid, 0.0) + sum(measured["fixtures"][key] for key in uses[item.nodeid])
        bound = BOUND_FLOOR + BOUND_FACTOR * alone
        marked = item.get_closest_marker("timeout")
        if marked is None or marked.args[0] > bound:
            item.add_marker(pytest.mark.timeout(bound), append=False)
