"""Every lazy package face lists its public names three times: the type checker's imports, the lazy table and
``__all__``. The three must name the same names, from the same modules, and every name must resolve: a name added to
one list and forgotten in another is a public name that mypy, ``from package import *`` or an attribute lookup does
not see. A face may bind some names eagerly (the leaderboard's torch-free card readers); those are in ``__all__``
too, and never also in the lazy table."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "arbibench"
# not public names: the lazy machinery and the typing and future imports every face uses
PLUMBING = {"__future__", "typing", "arbibench.lazy", "importlib"}


def _is_lazy(init: Path) -> bool:
    """A face is lazy when its ``__init__.py`` defines a module ``__getattr__`` (PEP 562), by ``def`` or by binding
    the pair that :func:`arbibench.lazy.lazy_exports` returns."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
        if isinstance(node, ast.Assign):
            names = [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            if any(getattr(t, "id", None) == "__getattr__" for t in names):
                return True
    return False


FACES = sorted(
    str(p.parent.relative_to(PACKAGE.parent)).replace("/", ".") for p in PACKAGE.glob("**/__init__.py") if _is_lazy(p)
)


def _lists(package: str) -> tuple[dict[str, str], dict[str, str], set[str], dict[str, str]]:
    """(type-checking imports: name -> module, the lazy table, __all__, eager imports: name -> module) of
    ``package``'s ``__init__.py``."""
    tree = ast.parse((PACKAGE.parent / package.replace(".", "/") / "__init__.py").read_text())
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    public: set[str] = set()
    eager: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    typed.update({a.asname or a.name: imp.module for a in imp.names})
        if isinstance(node, ast.ImportFrom) and node.module and node.module not in PLUMBING:
            eager.update({a.asname or a.name: node.module for a in node.names})
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        name = getattr(target, "id", None)
        if name == "_LAZY" and node.value is not None:
            lazy = ast.literal_eval(node.value)
        if name == "__all__" and node.value is not None:
            public = set(ast.literal_eval(node.value))
    eager.pop("__version__", None)  # bound eagerly on purpose, checked below
    return typed, lazy, public, eager


def test_every_lazy_face_is_found():
    assert {"arbibench", "arbibench.train", "arbibench.attacks", "arbibench.data", "arbibench.protocol",
            "arbibench.verify", "arbibench.leaderboard"} <= set(FACES)


@pytest.mark.parametrize(("text", "lazy"), [
    ("def __getattr__(name):\n    raise AttributeError(name)\n", True),  # a hand-written lookup, no table
    ("__getattr__, __dir__ = lazy_exports(__name__, _LAZY)\n", True),
    ("from x import y\n__all__ = ['y']\n", False),
])
def test_a_face_is_lazy_by_its_module_getattr_whatever_its_tables(tmp_path, text, lazy):
    init = tmp_path / "__init__.py"
    init.write_text(text)
    assert _is_lazy(init) is lazy


@pytest.mark.parametrize("package", FACES)
def test_a_lazy_face_names_each_public_name_once_in_all_three_lists(package):
    typed, lazy, public, eager = _lists(package)
    assert lazy, f"{package}: a module __getattr__ without a lazy table (use arbibench.lazy.lazy_exports)"
    public.discard("__version__")  # bound eagerly, not lazily
    assert not set(lazy) & set(eager), (package, "both eager and lazy", set(lazy) & set(eager))
    assert set(lazy) | set(eager) == public, (package, (set(lazy) | set(eager)) ^ public)
    assert set(typed) == set(lazy), (package, set(typed) ^ set(lazy))
    assert {n: typed[n] for n in lazy} == lazy, f"{package}: a name's module differs between the two lists"
    for name, module in lazy.items():  # and each resolves where the table says
        assert hasattr(importlib.import_module(module), name), f"{package}.{name}: not defined in {module}"
        assert getattr(importlib.import_module(package), name) is getattr(importlib.import_module(module), name)
    for name, module in eager.items():
        assert getattr(importlib.import_module(package), name) is getattr(importlib.import_module(module), name)
