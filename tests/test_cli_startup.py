"""``arbibench --help``, a command's ``--help`` and an argument error answer without importing torch, and so do the
torch-free layers (the card schema, the leaderboard, the public face ``import arbibench``).

Each check runs in a fresh interpreter whose import system refuses torch: a module that imports torch fails there,
where a check of ``sys.modules`` could pass by luck of import order.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arbibench.cli import COMMANDS, app, load_command

ROOT = Path(__file__).resolve().parents[1]

BLOCK_TORCH = """
import sys

class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None

sys.meta_path.insert(0, BlockTorch())
"""

RUN_CLI = """
from arbibench.cli import main
sys.argv = ["arbibench", *ARGS]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
assert "torch" not in sys.modules
print("exit code", code)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(ROOT)})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(f"ARGS = {list(args)!r}\n" + RUN_CLI)


def test_the_blocker_blocks_torch() -> None:
    result = _run("import arbibench.models.zoo")  # the zoo loads torch: must fail, or the tests below prove nothing
    assert result.returncode != 0 and "torch is blocked in this test" in result.stderr


def test_card_schema_leaderboard_and_public_face_import_without_torch() -> None:
    result = _run(
        "import arbibench, arbibench.cards, arbibench.leaderboard, arbibench.leaderboard.markdown\n"
        "import arbibench.leaderboard.cli, arbibench.leaderboard.ranking, arbibench.models.markdown\n"
        "from arbibench.leaderboard import load_cards\n"
        "cards = load_cards('model_info')\n"
        "assert cards and 'torch' not in sys.modules\n"
        "print(arbibench.__version__, len(cards))\n"
    )
    assert result.returncode == 0, result.stderr


def test_root_help_lists_every_command_without_torch() -> None:
    result = _cli("--help")
    assert result.returncode == 0, result.stderr
    assert "exit code 0" in result.stdout
    for name in COMMANDS:
        assert f" {name} " in result.stdout, name


@pytest.mark.parametrize("args", [
    ["eval", "--help"],
    ["import", "--help"],
    ["zoo", "--help"],
    ["zoo", "table", "--help"],
    ["leaderboard", "--help"],
    ["leaderboard", "markdown", "--help"],
    ["attacks", "--help"],
    ["attacks", "list", "--help"],
    ["corruptions", "--help"],
    ["corruptions", "generate", "--help"],
    ["protocol", "--help"],
    ["protocol", "run", "--help"],
    ["sweep", "--help"],
    ["train", "--help"],
    ["recalibrate", "--help"],
    ["verify", "--help"],
])
def test_command_help_without_torch(args: list[str]) -> None:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr
    assert "exit code 0" in result.stdout and "Usage:" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["eval", "--model", "resnet20_bnn", "--n-examples", "many"], "--n-examples"),
    (["evl"], "Did you mean 'eval'?"),
    (["eval", "--no-such-option"], "No such option"),
    (["protocol", "run", "--quick", "--models"], "requires an argument"),
    (["corruptions", "generate", "--seed", "x"], "--seed"),
    (["train", "--epochs", "x"], "--epochs"),
])
def test_argument_errors_without_torch(args: list[str], message: str) -> None:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr  # the interpreter ran to the end: exit code printed below
    assert "exit code 2" in result.stdout
    assert message in result.stdout + result.stderr


def test_leaderboard_markdown_runs_without_torch(tmp_path: Path) -> None:
    out = tmp_path / "board.md"
    result = _cli("leaderboard", "markdown", "--out", str(out), "--date", "2026-12-02")
    assert result.returncode == 0, result.stderr
    assert "exit code 0" in result.stdout and out.read_text().startswith("# arbibench leaderboard")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_command_loads_and_its_summary_is_its_help(name: str) -> None:
    """The root help's line for each command comes from a table, not the command: it must say what the command's
    own help says, and the table must point at a real command."""
    command = load_command(name)
    assert command.name == name
    own = " ".join((command.help or "").split())
    assert own.startswith(COMMANDS[name].summary), (name, own)


def test_unknown_command_is_one_error_from_the_table() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["leaderbord"])
    assert result.exit_code == 2 and "Did you mean 'leaderboard'?" in result.output


def test_the_leaderboard_library_reads_cards_never_the_model_layers() -> None:
    """Every import in arbibench/leaderboard (function-level and type-only ones included), but for its command
    module: the card schema, the files module and the leaderboard itself, never models, evaluation, train, protocol
    or torch. (Which checkpoints the zoo pins reaches the markdown as a plain mapping from the command.)"""
    import ast

    allowed = ("arbibench.cards", "arbibench.files", "arbibench.faults", "arbibench.version", "arbibench.lazy",
               "arbibench.leaderboard")
    forbidden = []
    for path in sorted((ROOT / "arbibench" / "leaderboard").glob("*.py")):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                if name == "torch" or name.startswith("torch.") or (
                        name.startswith("arbibench") and not name.startswith(allowed)):
                    forbidden.append(f"{path.name}: {name}")
    assert forbidden == []
