"""Time a sample of `make mutation`'s mutants one at a time, each in a process forked as mutmut's workers are.

    .venv/bin/python tests/mutation_sample.py 100 --seed 8            # 100 mutants drawn at random
    .venv/bin/python tests/mutation_sample.py --names NAME [NAME ...]  # these ones

Run it after `make mutation` (it reads `mutants/`: the mutated copy, mutmut's statistics of which tests call what)
with nothing else on the cores. It imports the tests once, then forks one process per mutant that runs the tests
mutmut would give it, as `make mutation` does (`tests/conftest.py` narrows and orders them), and prints each
mutant's verdict, seconds and slowest phases, then the total: where a full run's time goes, and what a change to
the tests or their order saves, on the same sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import tomllib
from pathlib import Path

import pytest
from mutmut.utils.format_utils import mangled_name_from_mutant_name

from mutation_report import STATUS, results

MUTANTS = Path(__file__).resolve().parents[1] / "mutants"


class Phases:
    """Each test phase's seconds, as pytest reports them."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float]] = []

    def pytest_runtest_logreport(self, report) -> None:
        self.rows.append((report.nodeid, report.when, report.duration))


def run_one(name: str, tests: list[str], args: list[str]) -> dict:
    """Fork, run `tests` against mutant `name` in the child as mutmut does, and return what the child saw."""
    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: mutmut's worker, its output thrown away
        os.close(read)
        os.environ["MUTANT_UNDER_TEST"] = name
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        phases = Phases()
        code = pytest.main(["--rootdir=.", "--tb=no", "-x", "-q", "-p", "no:randomly", *tests, *args],
                           plugins=[phases]) if tests else 33
        os.write(write, json.dumps(phases.rows).encode())
        os._exit(int(code))
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        rows = json.loads(pipe.read() or b"[]")
    _, status = os.waitpid(pid, 0)
    return {"name": name, "code": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - started,
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", nargs="?", type=int, default=50, help="how many mutants to draw (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    parser.add_argument("--names", nargs="+", help="these mutants instead of a draw")
    options = parser.parse_args(argv)
    if not (MUTANTS / "mutmut-stats.json").is_file():
        print(f"no mutmut statistics in {MUTANTS}/: run `make mutation` first", file=sys.stderr)
        return 1
    os.chdir(MUTANTS)
    sys.path.insert(0, str(MUTANTS / "src"))
    settings = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["mutmut"]
    callers = json.loads(Path("mutmut-stats.json").read_text())["tests_by_mangled_function_name"]
    everyone = sorted(name for codes in results(MUTANTS).values() for name in codes)
    names = options.names or random.Random(options.seed).sample(everyone, options.count)
    # As mutmut's fork server: the tests imported once, before any mutant's process is forked.
    pytest.main(["--rootdir=.", "--collect-only", "-qqq", *settings["pytest_add_cli_args_test_selection"],
                 *settings["pytest_add_cli_args"]])
    total = 0.0
    for name in names:
        tests = list(callers.get(mangled_name_from_mutant_name(name), []))  # tests/conftest.py orders them
        seen = run_one(name, tests, settings["pytest_add_cli_args"])
        total += seen["seconds"]
        verdict = STATUS.get(seen["code"], "suspicious")
        slow = ", ".join(f"{nodeid.split('::', 1)[1]} {when} {seconds:.1f} s"
                         for nodeid, when, seconds in seen["rows"] if seconds > 0.3)
        print(f"{seen['seconds']:6.2f} s  {verdict:11s} {name}  ({len({row[0] for row in seen['rows']})} tests{'; ' + slow if slow else ''})")
    print(f"{len(names)} mutants, {total:.0f} s one at a time ({total / max(len(names), 1):.2f} s each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
