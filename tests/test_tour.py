"""The tour prints the lesson's values, the same in English and in Spanish; each section returns what it printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import once_per_run
from jaxintro import i18n
from jaxintro.tour import SECTIONS, count_compiled_kernels, count_lowered_ops, lesson_batch, run_tour, title

LOCALE_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
HEADING = re.compile(r"^== \d+\. ([\w-]+): (.*)$", re.M)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def run_tour_process(argv: list[str], **locale: str) -> str:
    """`jaxintro ARGV` in a fresh process whose only locale variables are `locale`; its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in LOCALE_VARS} | locale
    script = Path(sys.executable).with_name("jaxintro")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "jaxintro.cli"]
    proc = subprocess.run(command + argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def tour_output(tmp_path_factory) -> str:
    def tour(_folder: Path) -> str:
        return run_tour_process(["--lang", "en", "tour"], LANG="es_ES.UTF-8")  # the flag beats the locale

    return once_per_run(tmp_path_factory, "tour-output", tour)[1]


@pytest.fixture(scope="module")
def tour_output_es(tmp_path_factory) -> str:
    def tour(_folder: Path) -> str:
        return run_tour_process(["tour"], LANG="es_ES.UTF-8")

    return once_per_run(tmp_path_factory, "tour-output-es", tour)[1]


@pytest.fixture
def english():
    """Tests that call `main` in-process leave the language as they found it: English."""
    yield
    i18n.set_language("en")


def sections(output: str) -> dict[str, str]:
    """Each section's printed text by section name (headings name sections untranslated)."""
    matches = list(HEADING.finditer(output))
    ends = [m.start() for m in matches[1:]] + [len(output)]
    return {m.group(1): output[m.start():end] for m, end in zip(matches, ends)}


# A Spanish decimal comma (1,381773, 1,9e-09), not a comma between a shape's sizes (f32[784,256]).
DECIMAL_COMMA = re.compile(r"(?<![\[\d,])(-?\d+),(\d+)(?![\d,\]])")


def numbers(text: str) -> list[str]:
    """Every number printed in `text`, except timings (lines with "ms"), which differ from run to run."""
    return [n for line in text.splitlines() if " ms" not in line for n in NUMBER.findall(line)]


@pytest.mark.parametrize("expected", [
    "grad(f)(3.0) = 6.0; grad(grad(f))(3.0) = 2.0",
    "a[0] = 5 raises TypeError: JAX arrays are immutable",
    "b = a.at[0].set(5.0) -> [5. 0. 0.]; a is unchanged: [0. 0. 0.]",
    "Python if on a traced value -> TracerBoolConversionError",
    "lax.cond: relu(2.0) = 2.0, relu(-2.0) = 0.0",
    "stacked = [ 1.  3.  6. 10. 15.]",
    "jax.debug.print at run time: x = 3.0, x * 2 = 6.0",
    "print() at trace time: JitTracer",
    "4 devices",
    "shard_map sum of arange(32) = 496.0",
    "[[10. 21. 32.]",
    "grad(grad(grad(f)))(1.0)   = -3.064715   closed form: -3.064715",
    "jacfwd == jacrev: True.",
    "jax.hessian of the loss with respect to the last layer's bias: shape (10, 10)",
    "selu's Python body ran 1 time in 21 calls",
    "jit(scale)(jnp.ones(4), 2.0)                        traces so far: 2  (new shape: retraced)",
    "jax.make_jaxpr(loss_fn)(params, x[4, 784], y[4])",
    "{ lambda ; a:f32[256] b:f32[784,256]",
])
def test_the_tour_prints_the_lessons_values(tour_output, expected):
    assert expected in tour_output


def test_prng_prints_its_verdict_from_a_comparison(tour_output):
    line = next(line for line in tour_output.splitlines() if line.startswith("normal(key(42)) twice"))
    first, second = re.findall(r"\[[^\]]*\]", line)
    # The verdict must agree with the two arrays printed on the same line.
    assert first == second and line.endswith("(identical)")


def test_every_section_runs_in_order(tour_output):
    assert [m.group(1) for m in HEADING.finditer(tour_output)] == list(SECTIONS)


def test_sections_return_what_they_show():
    results = run_tour(["grad", "per-example", "prng", "pytrees", "jit"], out=lambda _: None)
    assert results["grad"] == {"df": 6.0, "d2f": 2.0}
    per, mean = results["per-example"]["per"], results["per-example"]["mean"]
    assert [sum(col) / len(per) for col in zip(*per)] == pytest.approx(mean)
    assert results["prng"] == {"same": True, "different": True}
    assert results["pytrees"]["count"] == 11
    # 21 calls of the jitted function, one trace: the compiled program is reused (no timing asserted).
    assert results["jit"]["traces"] == 1


def test_trace_counts_ops_fusions_and_retraces():
    result = run_tour(["trace"], out=lambda _: None)["trace"]
    # first call; new values; new Python float; new shape; weak type; static 2.0; static 3.0; static 2.0 again.
    assert result["traces"] == [1, 1, 1, 2, 3, 4, 5, 5]
    assert result["eqns"] > 0
    assert 1 <= result["fusions"] <= result["kernels"] < result["ops"]


def test_the_counters_read_lowered_and_compiled_programs():
    lowered = jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0).lower(jnp.ones(8))
    assert count_lowered_ops(lowered.as_text()) >= 3  # sine, multiply, add (constants not counted)
    kernels, fusions = count_compiled_kernels(lowered.compile().as_text())
    assert (kernels, fusions) == (1, 1)  # XLA fuses the three elementwise operations into one loop


def test_derivatives_match_closed_forms_and_each_other():
    result = run_tour(["derivatives"], out=lambda _: None)["derivatives"]
    assert result["auto"] == pytest.approx(result["exact"], rel=1e-5)
    analytic = [[2.0, 1.0, 0.0], [1.0, 0.0, float(np.cos(3.0))]]  # h(v) = [v0 v1, v0 + sin v2] at v = (1, 2, 3)
    assert np.allclose(result["jacfwd"], analytic) and np.allclose(result["jacrev"], analytic)
    assert result["asymmetry"] < 1e-6 and result["fd_error"] < 1e-4 and result["row_sum"] < 1e-6
    assert result["n_params"] == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
    # An independent closed form for the printed Hessian: d2 loss / d b2 = mean over the batch of diag(p) - p p^T.
    from jaxintro.models import mlp

    _, params, x, _ = lesson_batch()
    p = jax.nn.softmax(mlp.mlp_forward(params, x))
    expected = jnp.mean(jax.vmap(lambda q: jnp.diag(q) - jnp.outer(q, q))(p), axis=0)
    hessian, fd = np.asarray(result["hessian"]), np.asarray(result["finite_differences"])
    assert hessian.shape == fd.shape == (10, 10)
    assert np.allclose(hessian, expected, atol=1e-6)
    # The printed checks are the real comparisons: each recomputed here from the matrices they describe.
    assert np.allclose(fd, expected, atol=1e-4)
    assert result["fd_error"] == pytest.approx(np.max(np.abs(hessian - fd)), rel=1e-5, abs=1e-9)
    assert result["asymmetry"] == pytest.approx(np.max(np.abs(hessian - hessian.T)), abs=1e-9)
    assert result["row_sum"] == pytest.approx(np.max(np.abs(hessian.sum(axis=1))), rel=1e-3, abs=1e-8)


def test_the_spanish_tour_prints_the_same_numbers(tour_output, tour_output_es):
    english, spanish = sections(tour_output), sections(tour_output_es)
    assert list(spanish) == list(english) == list(SECTIONS)
    for name in SECTIONS:  # Spanish writes a decimal comma where the number is prose (1,381773); code keeps 1.0
        assert numbers(DECIMAL_COMMA.sub(r"\1.\2", spanish[name])) == numbers(english[name]), name


def test_the_spanish_tour_reads_spanish(tour_output_es, english):
    i18n.set_language("es")
    headings = dict(m.groups() for m in HEADING.finditer(tour_output_es))
    assert headings == {name: title(name) for name in SECTIONS}
    i18n.set_language("en")
    assert all(headings[name] != title(name) for name in SECTIONS)
    # JAX's own error messages are quoted as JAX wrote them; nothing else may be English.
    ours = [line for line in tour_output_es.splitlines() if "Error:" not in line]
    english_words = re.compile(r"\b(the|and|with|when|calls|sums|returns|same|first|new|of)\b")
    assert [line for line in ours if english_words.search(line)] == []


def test_one_section_and_the_list(capsys, english):
    from jaxintro.cli import main

    assert main(["--lang", "en", "tour", "--section", "vmap"]) == 0
    out = capsys.readouterr().out
    assert "== 1. vmap" in out and "== 2." not in out
    assert main(["--lang", "en", "tour", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "debug-print" in listing and "derivatives" in listing and "trace " in listing
    assert main(["--lang", "es", "tour", "--list"]) == 0
    assert "Un `if` de Python sobre un valor trazado" in capsys.readouterr().out
    assert main(["--lang", "en", "tour", "--section", "nope"]) == 2
