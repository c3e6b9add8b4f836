"""`make mutation`'s report: per mutated module, mutants killed, survived (equivalent or not) and left unchecked.

Reads the results mutmut 3 keeps beside each mutated file (`mutants/<path>.py.meta`) and the reason
given for each survivor in `tests/mutation_survivors.toml`, and prints Markdown: the table, then every
survivor with its reason (with `--diffs`, the line it changed too; run it in the folder that holds
`mutants/`, as `mutmut show` needs). A survivor is `equivalent` (no input tells it from the code),
`accepted` (it differs only where it does not matter, said how), `untested` (a behaviour no test
pins yet) or `fixed` (a test added after the run kills it, watched failing with the change made by
hand; the next run counts it killed). The score leaves only the equivalent ones out:
killed / (killed + non-equivalent survivors).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

# mutmut's exit codes (mutmut/stats.py): 1 and 3 a test failed (killed), 0 every test passed (survived). A mutant
# no test of its module calls (33: none maps to it; 5: make mutation's narrowing left none) survived too: nothing
# would notice it.
STATUS = {1: "killed", 3: "killed", 0: "survived", None: "not checked", 33: "survived", 5: "survived",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 34: "skipped"}
VERDICTS = ("equivalent", "accepted", "untested", "fixed")
REASONS = Path(__file__).with_name("mutation_survivors.toml")


def results(mutants: Path) -> dict[str, dict[str, int | None]]:
    """Exit code of every mutant, by mutated source file (relative to the checkout)."""
    found = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        source = str(meta.relative_to(mutants)).removesuffix(".meta")
        found[source] = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    return found


def read_reasons(path: Path) -> dict[str, tuple[str, str]]:
    """Each survivor's (verdict, reason) from `"name" = "verdict: reason"` lines; a bad verdict is an error."""
    reasons = {}
    for name, text in tomllib.loads(path.read_text(encoding="utf-8")).items():
        verdict, _, reason = text.partition(": ")
        if verdict not in VERDICTS or not reason:
            raise ValueError(f"{path}: {name}: expected 'equivalent|accepted|untested|fixed: why', got {text!r}")
        reasons[name] = (verdict, reason)
    return reasons


def score_rows(by_file: dict[str, dict[str, int | None]], reasons: dict[str, tuple[str, str]]) -> list[str]:
    """The table's Markdown rows, one per module and a last one for all of them."""
    rows = ["| module | mutants | killed | survived | of them equivalent | not checked | killed of non-equivalent |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    everything = {name: code for codes in by_file.values() for name, code in codes.items()}
    for source, codes in (*by_file.items(), ("all", everything)):  # the last row: every module together
        counts = Counter(STATUS.get(code, "suspicious") for code in codes.values())
        survivors = [name for name, code in codes.items() if STATUS.get(code) == "survived"]
        equivalent = sum(reasons.get(name, ("",))[0] == "equivalent" for name in survivors)
        scored = counts["killed"] + counts["survived"] - equivalent
        score = f"{100 * counts['killed'] / scored:.1f}%" if scored else "-"
        unchecked = len(codes) - counts["killed"] - counts["survived"]
        rows.append(f"| {source} | {len(codes)} | {counts['killed']} | {counts['survived']} | {equivalent} "
                    f"| {unchecked} | {score} |")
    return rows


def survivor_lines(names: list[str], reasons: dict[str, tuple[str, str]], diffs: bool) -> list[str]:
    """One Markdown line per survivor, grouped by verdict: name, reason (and with `diffs` its change)."""
    grouped = defaultdict(list)
    for name in names:
        verdict, reason = reasons.get(name, ("no reason yet", f"add it to {REASONS.name}"))
        change = f" `{changed_line(name)}`" if diffs else ""
        grouped[verdict].append(f"- `{name.removeprefix('jaxintro.')}`: {reason}.{change}")
    lines = []
    for verdict in (*VERDICTS, "no reason yet"):
        if grouped[verdict]:
            lines += ["", f"{verdict} ({len(grouped[verdict])}):", *grouped[verdict]]
    return lines


def main(mutants: Path, diffs: bool = False) -> int:
    """Print the table and the survivors; 1 when mutmut left no results or a survivor has no reason."""
    by_file = results(mutants)
    if not by_file:
        print(f"no mutmut results under {mutants}/: run `make mutation`", file=sys.stderr)
        return 1
    reasons = read_reasons(REASONS)
    survivors = sorted(name for codes in by_file.values() for name, code in codes.items()
                       if STATUS.get(code) == "survived")
    print("\n".join(score_rows(by_file, reasons)))
    print(f"\n{len(survivors)} survived (each one's diff: .venv/bin/mutmut show NAME):")
    print("\n".join(survivor_lines(survivors, reasons, diffs)))
    return 1 if any(name not in reasons for name in survivors) else 0


def changed_line(name: str) -> str:
    """The mutant's change in one line, `old` -> `new`, from `mutmut show NAME`."""
    shown = subprocess.run([str(Path(sys.executable).with_name("mutmut")), "show", name], capture_output=True,
                           text=True, timeout=120).stdout.splitlines()
    old = " ".join(line[1:].strip() for line in shown if line.startswith("-") and not line.startswith("---"))
    new = " ".join(line[1:].strip() for line in shown if line.startswith("+") and not line.startswith("+++"))
    return f"{old[:110]}` -> `{new[:110]}".replace("|", "\\|")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--diffs"]
    sys.exit(main(Path(args[0] if args else "mutants"), diffs="--diffs" in sys.argv))
