"""docs/architecture.md stays true: every module it names exists, every module is named, and its rules hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "jaxintro"
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
NAMED = set(re.findall(r"`([\w/]+(?:\.py|/))`", DOC))


def modules() -> set[str]:
    """Every module of the package by its path under src/jaxintro/ (the exercises' reference solutions aside)."""
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "solutions" not in p.parts}


def test_every_module_it_names_exists():
    missing = [name for name in NAMED if not name.startswith(("tests/", "src/")) and "NAME" not in name
               and not (PACKAGE / name).exists()]
    assert not missing, missing
    assert len(NAMED) > 40


def test_every_module_is_named():
    unnamed = sorted(m for m in modules() if m not in NAMED)
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"


def top_level_imports(path: Path) -> set[str]:
    """The jaxintro modules `path` imports when it is imported (not inside functions, not for type checking)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxintro"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("jaxintro"))
    return found


def test_the_lesson_imports_nothing_of_jaxintro():
    assert top_level_imports(PACKAGE / "lesson.py") == set()


def test_the_command_line_imports_only_what_help_needs():
    assert top_level_imports(PACKAGE / "cli.py") <= {"jaxintro", "jaxintro.argtypes", "jaxintro.config",
                                                      "jaxintro.errors", "jaxintro.faults", "jaxintro.i18n",
                                                      "jaxintro.runs"}


def test_foundations_import_no_layer_above_them():
    foundations = {"argtypes", "claims", "config", "errors", "i18n", "jsonio", "data", "idx", "runs", "listing", "faults", "images", "grid",
                   "record"}
    for name in foundations:
        above = {m for m in top_level_imports(PACKAGE / f"{name}.py")
                 if m.removeprefix("jaxintro.").split(".")[0] not in foundations | {"jaxintro"}}
        assert not above, (name, above)


def test_an_epoch_and_its_shuffle_are_compiled_in_one_place_each():
    """The epoch program is lowered only in `Trainer.lower_epoch`, the shuffle jitted only in `layout.compile_plan`:
    train, bench, profile and the speedrun cannot drift, and share the shuffle's cache entry."""
    epochs, plans = [], []
    for path in PACKAGE.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(PACKAGE)}:{number}"
            if ".lower(" in line and "jit_epoch()" in line:
                epochs.append(where)
            if "jax.jit(" in line and "plan" in line:
                plans.append(where)
    assert len(epochs) == 1 and epochs[0].startswith("train.py"), epochs
    assert len(plans) == 1 and plans[0].startswith("layout.py"), plans
    # Whatever calls the lesson's shuffle itself: the engine's plan (`layout.bound_plan`), the speedrun's whole-run
    # program (its shuffles inside its one program) and bench's plan (the first epoch's batches, drawn op by op).
    callers = {path.name for path in PACKAGE.rglob("*.py") if path.name != "lesson.py"
               and any(isinstance(node, ast.Name) and node.id == "plan_epoch"
                       for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))}
    assert callers == {"layout.py", "speedrun.py", "bench_plan.py"}, callers


# ---------------------------------------------------------------- the import graph

HEAVY = ("jax", "jaxlib", "flax", "optax", "equinox", "orbax", "torch", "matplotlib")


def module_name(path: Path) -> str:
    """`src/jaxintro/models/mlp.py` -> `jaxintro.models.mlp` (a package by its `__init__.py`)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py") if "solutions" not in p.parts}


def imported(node: ast.AST) -> set[str]:
    """The jaxintro modules an import statement loads (`from jaxintro import runs` loads `jaxintro.runs`)."""
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxintro"):
        submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
        return submodules or {node.module}
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("jaxintro")}
    return set()


def run_at_import(tree: ast.Module) -> list[ast.AST]:
    """The nodes of a module that run when it is imported: not inside a function, nor under `TYPE_CHECKING`."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        found.append(node)
        todo += ast.iter_child_nodes(node)
    return found


def import_graph(*, at_import_time: bool) -> dict[str, set[str]]:
    """Module -> the jaxintro modules it imports: every import statement (inside functions and `TYPE_CHECKING`
    too), or only those that run when the module is imported (with the packages above it)."""
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = set().union(*map(imported, run_at_import(tree) if at_import_time else ast.walk(tree))) - {name}
        if at_import_time and "." in name.removeprefix("jaxintro."):
            graph[name].add(name.rsplit(".", 1)[0])
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None (a depth-first search)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = "open", path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node], _ = "done", path.pop()
        return None

    return next((c for node in sorted(graph) if node not in state for c in [visit(node)] if c), None)


def test_the_import_graph_has_no_cycle():
    """Layers never loop: no chain of imports (inside functions included) leads a module back to itself."""
    assert find_cycle(import_graph(at_import_time=False)) is None, " -> ".join(find_cycle(import_graph(at_import_time=False)))


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def direct_heavy_libraries(name: str) -> set[str]:
    """The heavy libraries (JAX, Optax, Flax, Equinox, Orbax, PyTorch, matplotlib) module `name` imports itself."""
    direct = {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
              for n in run_at_import(ast.parse(MODULES[name].read_text(encoding="utf-8")))
              if isinstance(n, (ast.Import, ast.ImportFrom)) for a in (n.names if isinstance(n, ast.Import) else [n])}
    return direct & set(HEAVY)


def heavy_libraries(name: str, graph: dict[str, set[str]], direct: dict[str, set[str]]) -> set[str]:
    """The heavy libraries importing `name` loads: its own and those of every module it reaches at import time."""
    reached, todo = {name}, [name]
    while todo:
        for module in graph[todo.pop()] & MODULES.keys():
            if module not in reached:
                reached.add(module)
                todo.append(module)
    return set().union(*(direct[module] for module in reached))


def test_a_function_level_import_only_keeps_heavy_libraries_out():
    """An import inside a function is there to keep a heavy library out of a path that does not need it (`--help`
    and `jaxintro runs` without JAX, a refused flag without a JAX start, `train` without Flax or matplotlib): it
    loads a library its module does not. Any other import belongs at the top of the module."""
    graph = import_graph(at_import_time=True)
    direct = {name: direct_heavy_libraries(name) for name in MODULES}
    heavy = {name: heavy_libraries(name, graph, direct) for name in MODULES}
    needless = []
    for name, path in MODULES.items():
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    needless += [f"{name}.{function.name} imports {m}" for m in imported(node)
                                 if heavy[m] <= heavy[name]]
    assert not needless, needless


def test_the_trainer_picks_a_layout_and_imports_none_inside_a_function():
    tree = ast.parse((PACKAGE / "train.py").read_text(encoding="utf-8"))
    inside = [m for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f) for m in imported(n)]
    assert inside == []
    assert {"jaxintro.layout", "jaxintro.members"} <= import_graph(at_import_time=True)["jaxintro.train"]


def test_no_module_is_longer_than_600_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long


def test_no_function_is_longer_than_80_lines():
    """A function reads on one screen (the argparse table too, today)."""
    long = [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1}" for name, path in MODULES.items()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80]
    assert not long, long


# A branch on what kind of run it is: the member count, the seed count, or sweep or not, read off a config. A
# heuristic: it sees `if`s and conditional expressions on `config.`, not a count kept in a variable and tested later.
MEMBER_COUNT_BRANCH = re.compile(r"\bif\b.*\bconfig\.(?:(?:members|seeds)\s*(?:==|!=|>=|<=|>|<)|sweep\b)")
# Where that choice is made: the layouts (one model, members), the grid (`grid.kind_of`) and the flags' rules.
CHOOSERS = {"layout.py", "members.py", "grid.py", "config.py"}


def member_count_branches(root: Path = PACKAGE) -> list[str]:
    """Every line outside the choosers that branches on the kind of run, as `module:line`."""
    return [f"{path.relative_to(root)}:{number}" for path in sorted(root.rglob("*.py")) if path.name not in CHOOSERS
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if MEMBER_COUNT_BRANCH.search(line.split("#")[0])]


def test_one_model_and_many_are_read_through_one_interface():
    """Readers ask the run's kind once (`report.report_for`, the layout): at most 5 branches elsewhere (19 before)."""
    found = member_count_branches()
    assert len(found) <= 5, found


def test_the_member_count_branch_pattern_sees_each_form_of_the_question(tmp_path):
    (tmp_path / "reader.py").write_text("if config.members == 1:\n    pass\nx = 1 if run.config.seeds > 1 else 2\n"
                                        "if not self.config.sweep:\n    pass\n# if config.sweep: (a comment)\n"
                                        "config.members\n")
    (tmp_path / "grid.py").write_text("if config.sweep:\n    pass\n")
    assert member_count_branches(tmp_path) == ["reader.py:1", "reader.py:3", "reader.py:4"]


def test_every_name_the_architecture_page_gives_exists_in_the_code():
    """`module.function` (or `module.Class.method`) in docs/architecture, in both languages, is in the code: the map
    a contributor follows names only what is there (`NAME` stands for any command's name)."""
    docs = REPO / "docs"
    text = (docs / "architecture.md").read_text(encoding="utf-8") + (docs / "architecture.es.md").read_text(
        encoding="utf-8")
    modules = {path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()}
    named = set(re.findall(r"`([a-z_]+(?:\.[A-Za-z_][A-Za-z_0-9]*)+)(?:\(\))?`", text))
    checked = [name for name in sorted(named) if name.split(".")[0] in modules and "NAME" not in name
               and name.split(".")[-1] not in ("py", "json", "log", "md", "toml", "txt", "png")]
    missing = [name for name in checked if not _found(name)]
    assert len(checked) > 20 and missing == [], f"docs/architecture names what the code does not hold: {missing}"


def _found(name: str) -> bool:
    """Whether `jaxintro.<name>` is a module, or an attribute (at any depth) of the longest module it starts with."""
    import importlib

    parts = name.split(".")
    for depth in range(len(parts), 0, -1):
        try:
            found = importlib.import_module("jaxintro." + ".".join(parts[:depth]))
        except ImportError:
            continue
        for attribute in parts[depth:]:
            found = getattr(found, attribute, None)
        return found is not None
    return False
