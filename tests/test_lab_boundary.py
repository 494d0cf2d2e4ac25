"""The lab stays out of the product: the wheel installs no ``lab`` and no queue, no module of ``arbibench/`` imports
or names the job runner, and the lab drives arbibench through its command line, importing only the bottom row."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as a package
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arbibench"
LAB = ROOT / "lab"
# the bottom row of docs/architecture.md: standard library only, so the lab's import of them loads no layer above
LAB_MAY_IMPORT = {"arbibench.files", "arbibench.terminal", "arbibench.clock"}
# what would tie the product to the job runner: its package, its command, its files
RUNNER_MENTIONS = re.compile(r"\blab\.queue\b|python -m lab\b|arbibench[ .]queue\b|queue(_state)?\.json|"
                             r"zoo_runs/carry|runs/queue\b|refs/arbibench")


def installed_packages(pyproject: str) -> list[str]:
    """The packages ``pip install .`` puts on the path, by the setuptools find settings of ``pyproject``."""
    find = tomllib.loads(pyproject)["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT), include=find.get("include", ("*",)), exclude=find.get("exclude", ()))


def _imported(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names (functions and TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_the_wheel_installs_no_lab_and_no_queue() -> None:
    packages = installed_packages((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "arbibench" in packages and "arbibench.protocol" in packages
    assert [p for p in packages if p.split(".")[0] == "lab" or "queue" in p.split(".")] == []
    # the check can fail: a find config that takes every package would install the lab
    assert "lab.queue" in installed_packages('[tool.setuptools.packages.find]\ninclude = ["*"]\n')


def test_no_module_of_the_package_imports_or_names_the_job_runner() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        offenders += [f"{rel}: imports {m}" for m in _imported(path) if m.split(".")[0] == "lab"]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if RUNNER_MENTIONS.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []
    assert RUNNER_MENTIONS.search("see `python -m lab queue status`")  # the pattern finds what it is for
    assert RUNNER_MENTIONS.search("from arbibench.queue.carry import merge_rows")


def test_the_lab_imports_only_the_package_s_bottom_row() -> None:
    """Everything else it asks of arbibench goes through the command line (``arbibench ...`` child processes)."""
    used = {m for path in LAB.rglob("*.py") for m in _imported(path) if m.split(".")[0] == "arbibench"}
    modules = {m for m in used if (ROOT / Path(*m.split("."))).with_suffix(".py").is_file()
               or (ROOT / Path(*m.split("."))).is_dir()}
    assert modules and modules <= LAB_MAY_IMPORT, sorted(modules - LAB_MAY_IMPORT)


def test_the_lab_runs_as_a_module_from_the_repository_root() -> None:
    out = subprocess.run([sys.executable, "-m", "lab", "queue", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for command in ("run", "status", "pause", "resume", "carry", "add-rows"):
        assert f" {command} " in out.stdout, command


def test_the_product_command_line_has_no_queue() -> None:
    from typer.testing import CliRunner

    from arbibench.cli import COMMANDS, app

    assert "queue" not in COMMANDS
    result = CliRunner().invoke(app, ["queue", "status"])
    assert result.exit_code == 2 and "No such command 'queue'" in result.output


def _lab_lines() -> list[str]:
    """Every ``python -m lab ...`` command line shown in docs/long-jobs.md's shell blocks and run by the Makefile."""
    page = (ROOT / "docs" / "long-jobs.md").read_text(encoding="utf-8")
    shown = [line for block in re.findall(r"```bash\n(.*?)```", page, flags=re.S) for line in block.splitlines()
             if line.startswith("python -m lab ")]
    shown += [line for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines() if line.startswith("\t")]
    return [re.split(r"\s+#|>|;", line[line.index("-m lab ") + 3:])[0].strip() for line in shown if "-m lab " in line]


def test_the_lab_commands_shown_and_run_are_real() -> None:
    import typer

    from lab.__main__ import app

    root = typer.main.get_command(app)
    lines = _lab_lines()
    assert len(lines) >= 8 and "lab queue pause --holder make-test" in lines  # the Makefile's included
    for line in lines:
        command, rest = root, line.split()[1:]
        while rest and not rest[0].startswith("-") and hasattr(command, "commands"):
            assert rest[0] in command.commands, line
            command, rest = command.commands[rest[0]], rest[1:]
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        assert {t for t in rest if t.startswith("-")} <= known, (line, known)
