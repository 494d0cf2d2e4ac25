"""The one-line `error:` of every command prints the problem as it is: no markup, no emoji codes read into it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from arbibench.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["eval", "--model", ":smile:"], "unknown model ':smile:'"),
        (["eval", "--model", "resnet20_bnn", "--attacks", "pgd@tanh:abc"], "tanh:abc"),
        (["leaderboard", "table", "--model-info", "no[such]:smile:folder"], "no[such]:smile:folder"),
    ],
)
def test_an_error_prints_the_names_it_was_given(tmp_path, args, shown):
    result = runner.invoke(app, [*args, *(["--store", str(tmp_path / "s.db")] if args[0] == "eval" else [])])
    assert result.exit_code == 2, result.output
    assert shown in result.output and "😄" not in result.output and "🔤" not in result.output
    assert not (tmp_path / "s.db").exists()
