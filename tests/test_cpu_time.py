"""tests/cpu_time.py: each test's CPU seconds, its process's and its children's, and the table by file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cpu_time

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end:\n    pass\n"


def test_a_test_s_own_cpu_and_its_childrens_are_counted_apart(tmp_path):
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\n\n"
        "def test_own():\n" + "".join(f"    {line}\n" for line in BURN.format(seconds=0.5).splitlines()) + "\n"
        "def test_child():\n"
        f"    subprocess.run([sys.executable, '-c', {BURN.format(seconds=0.5)!r}], check=True)\n")
    out = tmp_path / "cpu.jsonl"
    out.write_text('{"test": "an earlier run"}\n')  # each run starts the file anew
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"},  # not a worker: ""
           "CPU_TIME": str(out), "PYTHONPATH": str(Path(cpu_time.__file__).parent)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cpu_time", "-p", "no:randomly", "-p", "no:cacheprovider",
                    "test_burn.py"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)
    rows = {row["test"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"test_burn.py::test_own", "test_burn.py::test_child"}
    own, child = rows["test_burn.py::test_own"], rows["test_burn.py::test_child"]
    # Each burns 0.5 s of CPU, one in the test's process, one in its child (0.4 s: a margin)
    assert own["own"] >= 0.4 and own["children"] == 0
    assert child["children"] >= 0.4 and child["own"] < 0.4
    assert own["wall"] >= 0.4 and own["worker"] == ""


def test_the_table_sums_each_file_and_puts_the_costliest_first(tmp_path):
    def run(path: Path, *rows: tuple[str, float, float, float]) -> Path:
        path.write_text("".join(json.dumps({"test": t, "own": o, "children": c, "wall": w, "start": 0, "worker": "gw0"})
                                + "\n" for t, o, c, w in rows))
        return path

    after = run(tmp_path / "after.jsonl", ("tests/a.py::x", 1.0, 2.0, 4.0), ("tests/b.py::y", 5.0, 0.0, 5.0),
                ("tests/a.py::z", 0.5, 0.0, 1.0))
    before = run(tmp_path / "before.jsonl", ("tests/a.py::x", 4.0, 4.0, 8.0), ("tests/b.py::y", 6.0, 0.0, 6.0))
    assert cpu_time.table(after, before).splitlines() == [
        "| file | tests | CPU s | wall s | CPU s before |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| `tests/b.py` | 1 | 5.0 | 5.0 | 6.0 |",
        "| `tests/a.py` | 2 | 3.5 | 5.0 | 8.0 |",
        "| all | 3 | 8.5 | 10.0 | 14.0 |"]
    assert cpu_time.table(after).splitlines()[-1] == "| all | 3 | 8.5 | 10.0 |"
