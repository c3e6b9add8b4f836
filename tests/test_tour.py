"""The tour prints the lesson's values; each section returns what it printed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxintro.tour import SECTIONS, run_tour


@pytest.fixture(scope="module")
def tour_output() -> str:
    proc = subprocess.run([sys.executable, "-m", "jaxintro.cli", "tour"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("expected", [
    "grad(f)(3.0) = 6.0; grad(grad(f))(3.0) = 2.0",
    "a[0] = 5 raises TypeError: JAX arrays are immutable",
    "b = a.at[0].set(5.0) -> [5. 0. 0.]; a is unchanged: [0. 0. 0.]",
    "Python if on a traced value -> TracerBoolConversionError",
    "lax.cond: relu(2.0) = 2.0, relu(-2.0) = 0.0",
    "stacked = [ 1.  3.  6. 10. 15.]",
    "jax.debug.print at run time: x = 3.0, x * 2 = 6.0",
    "print() at trace time: JitTracer",
    "4 device(s)",
    "shard_map sum of arange(32) = 496.0",
    "(identical)",
    "[[10. 21. 32.]",
])
def test_the_tour_prints_the_lessons_values(tour_output, expected):
    assert expected in tour_output


def test_every_section_runs_in_order(tour_output):
    positions = [tour_output.index(f". {name}:") for name in SECTIONS]
    assert positions == sorted(positions)


def test_sections_return_what_they_show():
    results = run_tour(["grad", "per-example", "prng", "pytrees", "jit"], out=lambda _: None)
    assert results["grad"] == {"df": 6.0, "d2f": 2.0}
    per, mean = results["per-example"]["per"], results["per-example"]["mean"]
    assert [sum(col) / len(per) for col in zip(*per)] == pytest.approx(mean)
    assert results["prng"] == {"same": True, "different": True}
    assert results["pytrees"]["count"] == 11
    assert results["jit"]["first_ms"] > results["jit"]["later_ms"]


def test_one_section_and_the_list(capsys):
    from jaxintro.cli import main

    assert main(["tour", "--section", "vmap"]) == 0
    out = capsys.readouterr().out
    assert "== 1. vmap" in out and "== 2." not in out
    assert main(["tour", "--list"]) == 0
    assert "debug-print" in capsys.readouterr().out
    assert main(["tour", "--section", "nope"]) == 2
