"""`make mutation`'s report: the score leaves equivalent survivors out, and every survivor needs a reason."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from conftest import MUTATION_TESTS, REPO
import mutation_report
from mutation_report import REASONS, VERDICTS, main, read_reasons

KILLED, SURVIVED = 1, 0


def write_results(mutants, codes) -> None:
    """A mutants/ folder as mutmut 3 leaves it: exit codes by mutant, beside the mutated file's copy."""
    meta = mutants / "src" / "jaxintro" / "lesson.py.meta"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}), encoding="utf-8")


def test_the_score_leaves_equivalent_survivors_out_and_a_survivor_needs_a_reason(tmp_path, monkeypatch, capsys):
    reasons = tmp_path / "survivors.toml"
    reasons.write_text('"jaxintro.lesson.x_f__mutmut_1" = "equivalent: the same function"\n'
                       '"jaxintro.lesson.x_f__mutmut_2" = "untested: needs a test of f"\n', encoding="utf-8")
    monkeypatch.setattr(mutation_report, "REASONS", reasons)
    codes = {f"jaxintro.lesson.x_f__mutmut_{i}": code
             for i, code in enumerate([SURVIVED, SURVIVED, KILLED, KILLED, KILLED, None], start=1)}
    write_results(tmp_path / "mutants", codes)
    assert main(tmp_path / "mutants") == 0
    out = capsys.readouterr().out
    # 3 killed of the 4 that are not equivalent; the one not checked counts in neither.
    assert "| src/jaxintro/lesson.py | 6 | 3 | 2 | 1 | 1 | 75.0% |\n| all | 6 | 3 | 2 | 1 | 1 | 75.0% |" in out
    assert "untested (1):\n- `lesson.x_f__mutmut_2`: needs a test of f." in out

    write_results(tmp_path / "mutants", {**codes, "jaxintro.lesson.x_f__mutmut_7": SURVIVED})
    assert main(tmp_path / "mutants") == 1  # a new survivor has no reason yet
    assert "no reason yet (1):\n- `lesson.x_f__mutmut_7`: add it to survivors.toml." in capsys.readouterr().out


def test_the_last_row_adds_every_module_up(tmp_path, monkeypatch, capsys):
    reasons = tmp_path / "survivors.toml"
    reasons.write_text('"jaxintro.lesson.x_f__mutmut_1" = "equivalent: the same function"\n'
                       '"jaxintro.data.x_g__mutmut_1" = "accepted: differs where it does not matter"\n',
                       encoding="utf-8")
    monkeypatch.setattr(mutation_report, "REASONS", reasons)
    write_results(tmp_path / "mutants",
                  {"jaxintro.lesson.x_f__mutmut_1": SURVIVED, "jaxintro.lesson.x_f__mutmut_2": KILLED})
    data = tmp_path / "mutants" / "src" / "jaxintro" / "data.py.meta"
    data.write_text(json.dumps({"exit_code_by_key": {"jaxintro.data.x_g__mutmut_1": SURVIVED,
                                                     "jaxintro.data.x_g__mutmut_2": KILLED,
                                                     "jaxintro.data.x_g__mutmut_3": None}}), encoding="utf-8")
    assert main(tmp_path / "mutants") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| src/jaxintro/data.py | 3 | 1 | 1 | 0 | 1 | 50.0% |",
                    "| src/jaxintro/lesson.py | 2 | 1 | 1 | 1 | 0 | 100.0% |",
                    "| all | 5 | 2 | 2 | 1 | 1 | 66.7% |"]


def test_a_reason_needs_one_of_the_three_verdicts(tmp_path):
    path = tmp_path / "survivors.toml"
    path.write_text('"jaxintro.lesson.x_f__mutmut_1" = "probably fine: who knows"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape("expected 'equivalent|accepted|untested|fixed: why'")):
        read_reasons(path)


def test_the_projects_reasons_read():
    reasons = read_reasons(REASONS)
    assert reasons and {verdict for verdict, _ in reasons.values()} <= set(VERDICTS)


def test_every_test_a_module_is_judged_by_is_in_mutmuts_selection():
    """`MUTATION_TESTS` narrows what mutmut selected (pyproject.toml); a file named only in the first is never run."""
    selection = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"][
        "pytest_add_cli_args_test_selection"]
    for module, tests in MUTATION_TESTS.items():
        for test in tests:
            assert any(chosen.startswith(test) or test.startswith(chosen) for chosen in selection), (module, test)
