"""The package's import graph against the layer table of docs/architecture.md: every package imports only what its
row allows, every package has a row, and no circle, counting imports inside functions and under ``TYPE_CHECKING``.

The table is read from the page itself, so the page and this test cannot drift apart. An import inside a function
is allowed only to save start-up time (each says so with a ``# start-up:`` comment); it still counts as an arrow.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arbibench"
PAGE = ROOT / "docs" / "architecture.md"
CLI = "cli"  # the package of every cli.py and every module of a cli/ folder, wherever they live
FACE = "arbibench"  # arbibench/__init__.py


def read_layer_table(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(the bottom row's packages, each other package -> the packages its "depends on" cell names) from the page's
    "| package | holds | depends on |" table. The first row is the bottom, which every package may import."""
    rows = []
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| package |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not set(cells[0]) <= set("- "):
            rows.append((re.findall(r"`([\w.]+)`", cells[0]), re.findall(r"`([\w.]+)`", cells[-1])))
    if not rows:
        raise AssertionError(f"{PAGE}: no '| package | holds | depends on |' table")
    bottom = set(rows[0][0])
    deps: dict[str, set[str]] = {}
    for names, named in rows[1:]:
        for name in names:
            deps[name] = set(named)
    return bottom, deps


BOTTOM, DEPENDS = read_layer_table(PAGE.read_text(encoding="utf-8"))
PACKAGES = BOTTOM | set(DEPENDS)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def package_of(module: str) -> str:
    """The row of ``module``: ``cli`` for any cli.py or module of a cli/ folder, ``arbibench`` for the package's face,
    else its folder/file."""
    parts = module.split(".")
    if CLI in parts[1:]:
        return CLI
    return FACE if len(parts) == 1 else parts[1]


def _target(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The arbibench modules an import statement loads (``from pkg import submodule`` counts the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "arbibench"]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    if base.split(".")[0] != "arbibench":
        return []
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    # "from pkg import submodule" loads the submodule; a name defined in pkg/__init__.py needs pkg itself
    return subs if len(subs) == len(node.names) else [base, *subs]


def _imports(module: str, path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """Every arbibench module ``module`` imports (module level, in functions, under TYPE_CHECKING), and (line,
    statement) of each import inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    local: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            targets.update(_target(node, module, is_package))
            if in_function:
                local.append((node.lineno, ast.unparse(node)))
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return targets - {module}, local


GRAPH = {m: _imports(m, p)[0] for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def allowed(package: str) -> set[str]:
    """What ``package`` may import: itself, the bottom row, and its dependencies with theirs (transitively)."""
    seen, todo = {package}, list(DEPENDS.get(package, ()))
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += DEPENDS.get(p, ())
    return seen | BOTTOM


def test_the_page_states_the_design_layers() -> None:
    """The rows the design asks for, in the design's words (a new package adds a row; it does not drop one)."""
    assert {"files", "terminal", "faults", "cards"} <= BOTTOM
    assert DEPENDS["nn"] == set() and DEPENDS["data"] == set()
    assert DEPENDS["models"] == {"nn"}
    assert DEPENDS["attacks"] == {"nn"}
    assert DEPENDS["evaluation"] == {"data", "models", "attacks", "deploy"}
    assert DEPENDS["train"] == {"data", "models", "attacks"}
    assert DEPENDS["protocol"] == {"evaluation", "verify"}  # the verifier's certified end of eps* beside the attacks'
    assert DEPENDS["leaderboard"] <= BOTTOM and "models" not in allowed("leaderboard")
    assert {"nn"} <= DEPENDS["deploy"] <= {"nn", "models"}


def test_every_package_has_a_row() -> None:
    missing = sorted({package_of(m) for m in MODULES} - PACKAGES - {CLI, FACE})
    assert missing == [], f"add a row for {missing} to {PAGE.relative_to(ROOT)}"
    assert {CLI, FACE} <= set(DEPENDS)
    unknown = sorted({d for deps in DEPENDS.values() for d in deps} - PACKAGES)
    assert unknown == [], f"{PAGE.relative_to(ROOT)} names dependencies without a row: {unknown}"


def test_each_import_is_allowed_by_its_row() -> None:
    forbidden = sorted(
        f"{m} ({package_of(m)}) imports {t} ({package_of(t)})"
        for m, targets in GRAPH.items() for t in targets if package_of(t) not in allowed(package_of(m))
    )
    assert forbidden == []


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


def test_the_scan_sees_function_level_and_type_only_imports(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from arbibench.evaluation.plan import EvalPlan\n"
        "def f():\n    from arbibench.evaluation.runner import execute  # start-up: test\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    targets, local = _imports("arbibench.evaluation.example", path)
    assert targets == {"arbibench.evaluation.plan", "arbibench.evaluation.runner"}
    assert [line for line, _ in local] == [5]


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_table_reader_reads_rows_and_refuses_a_page_without_one() -> None:
    text = ("| package | holds | depends on |\n| --- | --- | --- |\n| `x`, `y` | z | stdlib |\n"
            "| `a` | b | `x`, numpy |\n| `c` | d | `a` |\n\nafter\n")
    assert read_layer_table(text) == ({"x", "y"}, {"a": {"x"}, "c": {"a"}})
    with pytest.raises(AssertionError, match="no '| package | holds | depends on |' table"):
        read_layer_table("no table here")


def test_imports_inside_functions_say_why() -> None:
    """Only to keep ``arbibench --help`` fast (torch takes seconds to import), with the reason beside it."""
    unexplained = []
    for module, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno, statement in _imports(module, path)[1]:
            context = " ".join(lines[max(0, lineno - 3): lineno + 2])
            if "# start-up:" not in context:
                unexplained.append(f"{path.relative_to(ROOT)}:{lineno}: {statement}")
    assert unexplained == []


def test_a_cli_folder_belongs_to_cli_and_the_rest_to_its_folder() -> None:
    assert package_of("arbibench.protocol.cli.run") == CLI and package_of("arbibench.protocol.cli") == CLI
    assert package_of("arbibench.leaderboard.cli") == CLI and package_of("arbibench.cli") == CLI
    assert package_of("arbibench.protocol.report") == "protocol" and package_of("arbibench.operations.split") == (
        "operations")
    assert package_of("arbibench") == FACE
