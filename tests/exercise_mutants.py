"""`make mutation-exercises`: mutate the learner's part of each reference solution and check every mutant.

A check that judges the learner's code is itself code under test: a mutant of our solution that its
exercise's check accepts is a wrong answer that passes. Each mutant changes one thing between the
solution's `# >>> solution` and `# <<<` markers (an operator, a comparison, a number or string, a
call dropped, a statement dropped, an element of a returned tuple, a library function swapped for
its look-alike) and is checked in-process, as `tests/test_exercises.py` checks the catalogue of
typical wrong answers. The report gives, per exercise, mutants killed of all, and lists every
survivor with the reason `tests/exercise_mutation_survivors.toml` gives for it (equivalent: no input
tells it from ours, left out of the score).

    .venv/bin/python tests/exercise_mutants.py [--workers 2] [--only 8,13]
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import signal
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "src" / "jaxintro" / "exercises" / "solutions"
REASONS = Path(__file__).with_name("exercise_mutation_survivors.toml")
SECONDS_PER_MUTANT = 60  # a mutant that runs longer (a loop made endless) counts as caught, as the runner's limit would

BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
          ast.FloorDiv: ast.Div, ast.MatMult: ast.Mult}
COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
           ast.Is: ast.IsNot, ast.IsNot: ast.Is}
# A library function and the look-alike a learner reaches for by mistake.
LOOK_ALIKES = {"mean": "sum", "sum": "mean", "log_softmax": "softmax", "softmax": "log_softmax", "relu": "gelu",
               "clip_by_global_norm": "clip", "perf_counter": "process_time", "normal": "uniform",
               "zeros": "ones", "ones": "zeros", "max": "min", "min": "max", "sqrt": "square", "split": "fold_in",
               "set": "add", "bernoulli": "uniform", "take_along_axis": "take", "value_and_grad": "grad",
               "apply_updates": "tree_map", "where": "select"}
IDENTITY = "(lambda value, *args, **kwargs: value)"


def solution_lines(source: str) -> set[int]:
    """The line numbers between the `# >>> solution` and `# <<<` markers (the learner's part)."""
    lines, inside = set(), False
    for number, line in enumerate(source.splitlines(), 1):
        if line.strip() == "# >>> solution":
            inside = True
        elif line.strip() == "# <<<":
            inside = False
        elif inside:
            lines.add(number)
    return lines


def _edits(node: ast.AST, names: list[str]) -> Iterator[tuple[str, object]]:
    """(description, edit) for each one-token change of `node`; an edit mutates a copy of `node` in place."""
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        new = BINARY[type(node.op)]
        yield f"{type(node.op).__name__} -> {new.__name__}", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield "-x -> +x", lambda n: setattr(n, "op", ast.UAdd())
    elif isinstance(node, ast.Compare) and type(node.ops[0]) in COMPARE:
        new = COMPARE[type(node.ops[0])]
        yield f"{type(node.ops[0]).__name__} -> {new.__name__}", lambda n: n.ops.__setitem__(0, new())
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        yield f"{node.value!r} -> {node.value + 1!r}", lambda n: setattr(n, "value", n.value + 1)
    elif isinstance(node, ast.Constant) and node.value is None:
        yield "None -> 0", lambda n: setattr(n, "value", 0)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
        other = {"w": "b", "b": "w"}.get(node.value, "X" + node.value)
        yield f"{node.value!r} -> {other!r}", lambda n: setattr(n, "value", other)
    elif isinstance(node, ast.Call) and node.args:
        yield f"drop the call {ast.unparse(node.func)}(...)", lambda n: setattr(n, "func", ast.parse(IDENTITY).body[0].value)
    elif isinstance(node, ast.Attribute) and node.attr in LOOK_ALIKES:
        yield f".{node.attr} -> .{LOOK_ALIKES[node.attr]}", lambda n: setattr(n, "attr", LOOK_ALIKES[n.attr])
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield f"drop the statement {ast.unparse(node)[:40]}", lambda n: setattr(n, "value", ast.Constant(None))
    elif isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts) \
            and isinstance(node.ctx, ast.Load):
        for i, element in enumerate(node.elts):
            for name in names:
                if name != element.id:
                    yield (f"tuple element {i} ({element.id}) -> {name}",
                           lambda n, i=i, name=name: n.elts.__setitem__(i, ast.Name(name, ast.Load())))


def mutants(path: Path) -> Iterator[tuple[str, str]]:
    """(id, source) of every mutant of the solution at `path`; the id names the line and the change."""
    source = path.read_text(encoding="utf-8")
    tree, inside = ast.parse(source), solution_lines(source)
    nodes = list(ast.walk(tree))
    # The names a learner's part binds (assignments and its functions' arguments): what a tuple may hold instead.
    names = sorted({n.id for n in nodes if isinstance(n, ast.Name) and getattr(n, "lineno", 0) in inside
                    and isinstance(n.ctx, ast.Store)}
                   | {n.arg for n in nodes if isinstance(n, ast.arg) and getattr(n, "lineno", 0) in inside})
    for index, node in enumerate(nodes):
        if getattr(node, "lineno", None) not in inside:
            continue
        for description, edit in _edits(node, names):
            mutated = copy.deepcopy(tree)
            edit(list(ast.walk(mutated))[index])
            text = ast.unparse(mutated)
            if text != ast.unparse(tree):
                yield f"{path.stem}:{node.lineno}:{node.col_offset}: {description}", text


def _alarm(_signum, _frame):
    raise TimeoutError


def check_mutant(job: tuple[int, str, str]) -> tuple[str, str]:
    """(id, outcome) for one mutant: `survived`, or the key its check failed with (it was caught)."""
    number, mutant_id, text = job
    from jaxintro.exercises.catalog import by_number
    from jaxintro.exercises.runner import check_file

    exercise = by_number(number)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / exercise.filename
        path.write_text(text, encoding="utf-8")
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(SECONDS_PER_MUTANT)
        try:
            verdict = check_file(exercise, path)
        except TimeoutError:
            return mutant_id, "timeout"
        finally:
            signal.alarm(0)
    return mutant_id, "survived" if verdict.passed else verdict.key or "failed"


def _worker_start(home: str) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(home)  # not the checkout's .hypothesis/


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="", help="exercise numbers, e.g. 8,13 (default: all)")
    args = parser.parse_args(argv)
    only = {int(n) for n in args.only.split(",") if n}
    jobs = [(int(path.name[:2]), mutant_id, text) for path in sorted(SOLUTIONS.glob("[0-9][0-9]_*.py"))
            if not only or int(path.name[:2]) in only for mutant_id, text in mutants(path)]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as home, \
            ProcessPoolExecutor(args.workers, initializer=_worker_start, initargs=(home,)) as pool:
        outcomes = dict(pool.map(check_mutant, jobs, chunksize=4))
    reasons = tomllib.loads(REASONS.read_text(encoding="utf-8")) if REASONS.exists() else {}
    print(report(jobs, outcomes, reasons, time.perf_counter() - start))
    unexplained = [m for m, o in outcomes.items() if o == "survived" and m not in reasons]
    return 1 if unexplained else 0


def report(jobs: list[tuple[int, str, str]], outcomes: dict[str, str], reasons: dict[str, str],
           seconds: float) -> str:
    """The Markdown report: per exercise, killed of all; every survivor with its reason; the score."""
    lines = ["| exercise | mutants | killed | survived (equivalent) |", "| --- | ---: | ---: | ---: |"]
    totals = [0, 0, 0]
    stems = sorted({m.split(":")[0] for _n, m, _t in jobs})
    for stem in stems:
        ids = [m for _n, m, _t in jobs if m.split(":")[0] == stem]
        survived = [m for m in ids if outcomes[m] == "survived"]
        equivalent = [m for m in survived if reasons.get(m, "").startswith("equivalent")]
        lines.append(f"| `{stem}` | {len(ids)} | {len(ids) - len(survived)} | {len(survived)} ({len(equivalent)}) |")
        totals = [totals[0] + len(ids), totals[1] + len(ids) - len(survived), totals[2] + len(equivalent)]
    every, killed, equivalent = totals
    lines.append(f"| all | {every} | {killed} | {every - killed} ({equivalent}) |")
    lines.append("")
    lines.append(f"Killed {killed} of {every} mutants; {killed} of the {every - equivalent} non-equivalent "
                 f"({100 * killed / max(1, every - equivalent):.1f} %), in {seconds:.0f} s.")
    survivors = sorted(m for m, o in outcomes.items() if o == "survived")
    if survivors:
        lines += ["", "Survivors:"] + [f"- `{m}`: {reasons.get(m, 'NO REASON GIVEN')}" for m in survivors]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
