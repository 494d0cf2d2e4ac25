"""The package's import graph: no circles, arrows only downward through the layers, and no import hidden inside a
function except to save start-up time (each says so with a ``# start-up:`` comment).

Layers, lowest first: cards/faults (stdlib only) and terminal (the commands' console), data, nn, models, attacks,
evaluation and train, protocol, leaderboard, cli. A module may import its own layer and the layers below it, never
one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "arbibench"

LAYERS: dict[str, int] = {
    "arbibench.cards": 0,
    "arbibench.files": 0,
    "arbibench.faults": 0,
    "arbibench.terminal": 0,
    "arbibench.version": 0,
    "arbibench.data": 1,
    "arbibench.nn": 2,
    "arbibench.models": 3,
    "arbibench.deploy": 3,  # bit-packed deployed inference: reads nn and models, nothing above
    "arbibench.attacks": 4,
    "arbibench.evaluation": 5,
    "arbibench.train": 5,
    "arbibench.protocol": 6,
    "arbibench.leaderboard": 7,
    "arbibench.queue": 7,  # runs long jobs as child processes; imports only files and terminal
    "arbibench.cli": 8,
    "arbibench": 9,  # the package's public face (arbibench/__init__.py) re-exports from every layer
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


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
    # "from pkg import submodule" loads the submodule, which Python resolves even while pkg is half-initialised;
    # a name defined in pkg/__init__.py needs pkg itself
    return subs if len(subs) == len(node.names) else [base, *subs]


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(module: str, path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """Module-level arbibench imports, and (line, statement) of every import inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    top: set[str] = set()
    local: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                if in_function:
                    local.append((node.lineno, ast.unparse(node)))
                else:
                    top.update(_target(node, module, is_package))
            elif isinstance(node, ast.If) and _is_type_checking(node):
                continue  # annotations only: never executed
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, True)
            elif hasattr(node, "body"):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, field, []) or [], in_function)

    visit(tree.body, False)
    return top - {module}, local


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
        for w in graph.get(v, ()):
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


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_arrows_point_down_the_layers() -> None:
    upward = sorted(
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in GRAPH.items() for t in targets if t in MODULES and _layer(t) > _layer(m)
    )
    assert upward == []


def test_imports_inside_functions_say_why() -> None:
    """Only to keep ``arbibench --help`` fast (torch takes seconds to import), with the reason beside it."""
    unexplained = []
    for module, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno, statement in _imports(module, path)[1]:
            context = " ".join(lines[max(0, lineno - 3): lineno + 2])
            if "# start-up:" not in context:
                unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{lineno}: {statement}")
    assert unexplained == []
