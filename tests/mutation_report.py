"""`make mutation`'s report: per mutated module, mutmut's mutants killed, survived and left unchecked.

Reads the results mutmut 3 keeps beside each mutated file (`mutants/<path>.py.meta`) and prints a
Markdown table, then every mutant that survived (with `--diffs`, the line each one changed; run it in
the folder that holds `mutants/`, as `mutmut show` needs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

# mutmut's exit codes (mutmut/stats.py): 1 and 3 a test failed (killed), 0 every test passed (survived).
STATUS = {1: "killed", 3: "killed", 0: "survived", None: "not checked", 33: "no tests", 5: "no tests",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 34: "skipped"}


def results(mutants: Path) -> dict[str, dict[str, int | None]]:
    """Exit code of every mutant, by mutated source file (relative to the checkout)."""
    found = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        source = str(meta.relative_to(mutants)).removesuffix(".meta")
        found[source] = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    return found


def main(mutants: Path, diffs: bool = False) -> int:
    """Print the table and the survivors (with `diffs`, each one's change); 1 when mutmut left no results."""
    by_file = results(mutants)
    if not by_file:
        print(f"no mutmut results under {mutants}/: run `make mutation`", file=sys.stderr)
        return 1
    print("| module | mutants | killed | survived | other (timeout, no tests, not checked) | killed of checked |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    survivors = []
    for source, codes in by_file.items():
        counts = Counter(STATUS.get(code, "suspicious") for code in codes.values())
        checked = counts["killed"] + counts["survived"]
        score = f"{100 * counts['killed'] / checked:.1f}%" if checked else "-"
        other = len(codes) - checked
        print(f"| {source} | {len(codes)} | {counts['killed']} | {counts['survived']} | {other} | {score} |")
        survivors += sorted(name for name, code in codes.items() if STATUS.get(code) == "survived")
    print(f"\n{len(survivors)} survived (each one's diff: .venv/bin/mutmut show NAME):")
    for name in survivors:
        print(f"- `{name}`: {changed_line(name) if diffs else ''}".rstrip(": "))
    return 0


def changed_line(name: str) -> str:
    """The mutant's change in one line, `old` -> `new`, from `mutmut show NAME`."""
    shown = subprocess.run([str(Path(sys.executable).with_name("mutmut")), "show", name], capture_output=True,
                           text=True, timeout=120).stdout.splitlines()
    old = " ".join(line[1:].strip() for line in shown if line.startswith("-") and not line.startswith("---"))
    new = " ".join(line[1:].strip() for line in shown if line.startswith("+") and not line.startswith("+++"))
    return f"`{old[:110]}` -> `{new[:110]}`".replace("|", "\\|")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--diffs"]
    sys.exit(main(Path(args[0] if args else "mutants"), diffs="--diffs" in sys.argv))
