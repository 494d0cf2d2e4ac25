"""README's commands are real: every ``arbibench ...`` line in its shell blocks names an existing command, and each
``--option`` it shows is one that command takes. (A renamed option otherwise lives on in the README for months.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from arbibench.cli import COMMANDS, load_command

ROOT = Path(__file__).resolve().parents[1]


def _shell_lines(text: str) -> list[str]:
    """The ``arbibench`` command lines of the ```bash blocks, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if line.startswith("arbibench "):
                lines.append(line)
    return lines


README_LINES = _shell_lines((ROOT / "README.md").read_text(encoding="utf-8"))


def _resolve(tokens: list[str]) -> tuple[Any, list[str]]:
    """The click command the tokens name (``eval``, ``zoo list``, ...) and the tokens left for it."""
    name, rest = tokens[0], tokens[1:]
    assert name in COMMANDS, f"README names an unknown command: arbibench {name}"
    command = load_command(name)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        assert sub is not None, f"README names an unknown command: arbibench {name} {rest[0]}"
        name, command, rest = f"{name} {rest[0]}", sub, rest[1:]
    return command, rest


def test_readme_shows_commands() -> None:
    assert len(README_LINES) >= 15  # the parser found the blocks; otherwise the test below checks nothing


@pytest.mark.parametrize("line", README_LINES)
def test_readme_command_line_matches_the_cli(line: str) -> None:
    tokens = [t.strip("[]") for t in shlex.split(line)[1:]]
    command, rest = _resolve(tokens)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for token in rest:
        option = token.split("=")[0]
        if option.startswith("-"):
            assert option in known, f"{line!r}: {option} is not an option of this command ({sorted(known)})"


def test_the_check_catches_a_wrong_option() -> None:
    command, rest = _resolve(["eval", "--no-such-flag"])
    known = {opt for param in command.params for opt in param.opts}
    assert "--no-such-flag" not in known and "--n-examples" in known


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_imports_exist_and_calls_take_their_keywords() -> None:
    """Each name README's Python imports exists where it says, and each call of an imported function passes only
    keywords that function takes (and no more positional arguments than it has)."""
    import ast
    import importlib
    import inspect

    blocks = _python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert blocks
    checked = 0
    for block in blocks:
        tree = ast.parse(block)
        functions: dict[str, Any] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"README imports {alias.name} from {node.module}"
                    functions[alias.asname or alias.name] = getattr(module, alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
                target = functions[node.func.id]
                if not callable(target) or inspect.isclass(target):
                    continue
                params = inspect.signature(target).parameters
                takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
                for kw in node.keywords:
                    assert kw.arg is None or takes_kwargs or kw.arg in params, f"{node.func.id}(... {kw.arg}=...)"
                positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                if not any(p.kind is p.VAR_POSITIONAL for p in params.values()):
                    assert len(node.args) <= len(positional), f"{node.func.id}: too many positional arguments"
                checked += 1
    assert checked >= 8
