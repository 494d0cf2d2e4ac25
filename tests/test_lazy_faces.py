"""Every lazy package face lists its public names three times: the type checker's imports, the lazy table and
``__all__``. The three must name the same names, from the same modules, and every name must resolve: a name added to
one list and forgotten in another is a public name that mypy, ``from package import *`` or an attribute lookup does
not see."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "arbibench"
FACES = sorted(
    str(p.parent.relative_to(PACKAGE.parent)).replace("/", ".")
    for p in PACKAGE.glob("**/__init__.py")
    if "_LAZY" in p.read_text()
)


def _lists(package: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """(type-checking imports: name -> module, the lazy table, __all__) of ``package``'s ``__init__.py``."""
    tree = ast.parse((PACKAGE.parent / package.replace(".", "/") / "__init__.py").read_text())
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    public: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    typed.update({a.asname or a.name: imp.module for a in imp.names})
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        name = getattr(target, "id", None)
        if name == "_LAZY" and node.value is not None:
            lazy = ast.literal_eval(node.value)
        if name == "__all__" and node.value is not None:
            public = set(ast.literal_eval(node.value))
    return typed, lazy, public


def test_every_lazy_face_is_found():
    assert {"arbibench", "arbibench.train", "arbibench.attacks", "arbibench.data"} <= set(FACES)


@pytest.mark.parametrize("package", FACES)
def test_a_lazy_face_names_each_public_name_once_in_all_three_lists(package):
    typed, lazy, public = _lists(package)
    assert lazy, f"{package}: no lazy table"
    public.discard("__version__")  # bound eagerly, not lazily
    assert set(lazy) == public, (package, set(lazy) ^ public)
    assert set(typed) == set(lazy), (package, set(typed) ^ set(lazy))
    assert {n: typed[n] for n in lazy} == lazy, f"{package}: a name's module differs between the two lists"
    for name, module in lazy.items():  # and each resolves where the table says
        assert hasattr(importlib.import_module(module), name), f"{package}.{name}: not defined in {module}"
        assert getattr(importlib.import_module(package), name) is getattr(importlib.import_module(module), name)
