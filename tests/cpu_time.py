"""Where the suite's CPU time goes: each test's CPU seconds, its own process's and its children's, file by file.

A pytest plugin that tests/conftest.py registers when CPU_TIME names a file. pytest's `--durations` gives wall
time, which on two busy cores says little about what a test costs (a test that waits on a heartbeat takes time
and no CPU; a test that starts processes costs CPU its own process never shows):

    CPU_TIME=$PWD/cpu.jsonl make test                          # one JSON line per test, from both workers
    .venv/bin/python tests/cpu_time.py cpu.jsonl [BEFORE.jsonl]  # the table; with BEFORE, its CPU beside

A child counts once it has been waited for (`getrusage(RUSAGE_CHILDREN)`), so a process a test leaves running
counts nowhere, nor the browser a driver starts; a module fixture counts in the first test that asks for it.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest


def cpu_seconds() -> tuple[float, float]:
    """User + system CPU seconds of this process, and of its children waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    (own, children), start, wall = cpu_seconds(), time.time(), time.perf_counter()
    yield
    own_after, children_after = cpu_seconds()
    with open(os.environ["CPU_TIME"], "a", encoding="utf-8") as out:  # one short write per line: workers share it
        out.write(json.dumps({"test": item.nodeid, "own": own_after - own, "children": children_after - children,
                              "wall": time.perf_counter() - wall, "start": start,
                              "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")


def per_file(path: Path) -> dict[str, list[float]]:
    """File -> [tests, CPU seconds, wall seconds] from one run's lines."""
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        entry = files[row["test"].split("::")[0]]
        entry[0] += 1
        entry[1] += row["own"] + row["children"]
        entry[2] += row["wall"]
    return files


def table(after: Path, before: Path | None = None, top: int = 20) -> str:
    """The `top` files by CPU seconds (and each one's CPU seconds in `before`), then the whole suite's."""
    now, then = per_file(after), per_file(before) if before else {}
    head = "| file | tests | CPU s | wall s |" + (" CPU s before |" if before else "")
    lines = [head, "| --- | ---: | ---: | ---: |" + (" ---: |" if before else "")]
    for name, (tests, cpu, wall) in sorted(now.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| `{name}` | {tests:.0f} | {cpu:.1f} | {wall:.1f} |"
                     + (f" {then[name][1]:.1f} |" if name in then else (" |" if before else "")))
    total = [sum(entry[i] for entry in now.values()) for i in range(3)]
    lines.append(f"| all | {total[0]:.0f} | {total[1]:.1f} | {total[2]:.1f} |"
                 + (f" {sum(entry[1] for entry in then.values()):.1f} |" if before else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
