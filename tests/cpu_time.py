"""Where the suite's CPU time goes: each test's CPU seconds, its own process's and its children's, file by file.

A pytest plugin that tests/conftest.py registers when CPU_TIME names a file. pytest's `--durations` gives wall
time, which on two busy cores says little about what a test costs (a test that waits on a heartbeat takes time
and no CPU; a test that starts processes costs CPU its own process never shows):

    CPU_TIME=$PWD/cpu.jsonl make test                          # one JSON line per test, from every worker
    .venv/bin/python tests/cpu_time.py cpu.jsonl [BEFORE.jsonl]  # the table; with BEFORE, its CPU beside

A child counts once it has been waited for (`getrusage(RUSAGE_CHILDREN)`): in the test that reaps it, whichever that
is; a module or session fixture counts in the first test that asks for it. Each line also has the test's start
(seconds since the epoch) and its pytest-xdist worker, for a timeline of the workers.
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


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # once per run, before the workers start: a new file, not two runs in one
        Path(os.environ["CPU_TIME"]).write_text("", encoding="utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    (own, children), start, wall = cpu_seconds(), time.time(), time.perf_counter()
    yield
    own_after, children_after = cpu_seconds()
    line = json.dumps({"test": item.nodeid, "own": own_after - own, "children": children_after - children,
                       "wall": time.perf_counter() - wall, "start": start,
                       "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n"
    # Both workers append to the file: one write of one short line each (O_APPEND), never interleaved.
    fd = os.open(os.environ["CPU_TIME"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def per_file(path: Path) -> dict[str, list[float]]:
    """File -> [tests, CPU seconds, wall seconds] from one run's lines."""
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])  # the count stays an int
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
        lines.append(f"| `{name}` | {tests} | {cpu:.1f} | {wall:.1f} |"
                     + (f" {then[name][1]:.1f} |" if name in then else (" |" if before else "")))
    total = [sum(entry[i] for entry in now.values()) for i in range(3)]
    lines.append(f"| all | {total[0]} | {total[1]:.1f} | {total[2]:.1f} |"
                 + (f" {sum(entry[1] for entry in then.values()):.1f} |" if before else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
