"""Public names that load on first use (PEP 562), so ``arbibench <command> --help`` answers without importing torch.

A package lists its public names and the modules that define them; the package's ``__getattr__`` imports every one
of those modules on the first lookup (as the eager imports did, so that, e.g., every attack registers itself before
the registry is asked) and binds every name in the package's namespace, so later lookups are plain attribute reads.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public ``names`` map to the modules that define them."""

    def getattr_(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace = sys.modules[package].__dict__
        for module in dict.fromkeys(names.values()):
            importlib.import_module(module)
        for public, module in names.items():
            namespace[public] = getattr(importlib.import_module(module), public)
        return namespace[name]

    def dir_() -> list[str]:
        return sorted({*sys.modules[package].__dict__, *names})

    return getattr_, dir_
