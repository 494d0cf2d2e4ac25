"""The lab queue's answers to a mistake in its files: one error line naming the file and the fix, no traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from lab.__main__ import app


def _refused(args: list[str], *words: str) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    assert result.output.count("error:") == 1 and ("\n" + result.output).count("\nerror:") == 1, result.output
    line = " ".join(result.output[result.output.index("error:"):].split())
    for word in words:
        assert word in line, line
    return line


def test_queue_status_names_a_broken_plan_or_state(tmp_path: Path) -> None:
    plan, state = tmp_path / "queue.json", tmp_path / "queue_state.json"
    common = ["--plan", str(plan), "--state", str(state), "--run-dir", str(tmp_path / "runner")]
    plan.write_text("[]")
    _refused(["queue", "status", *common], "queue plan is a JSON object")
    plan.write_text(json.dumps({"jobs": []}))
    state.write_text('{"done')  # a write cut short
    _refused(["queue", "status", *common], "queue_state.json is not valid JSON", "restore it")
    state.write_text("[1, 2]")
    _refused(["queue", "status", *common], "not the queue's record")


def test_a_plan_whose_steps_are_a_string_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "queue.json"
    plan.write_text(json.dumps({"jobs": [{"name": "a", "steps": "echo hi"}]}))  # one command per character
    files = ["--plan", str(plan), "--state", str(tmp_path / "s.json"), "--run-dir", str(tmp_path / "runner")]
    _refused(["queue", "status", *files], "steps must be a list of commands")
    _refused(["queue", "run", *files, "--no-commit"], "steps must be a list of commands")
    assert not (tmp_path / "s.json").exists()


def test_add_rows_names_a_truncated_rows_file(tmp_path: Path) -> None:
    plan = tmp_path / "queue.json"
    store = str(tmp_path / "full.db")
    plan.write_text(json.dumps({"jobs": [{
        "name": "p", "snapshot": [store, str(tmp_path / "copy.db")],
        "steps": [["arbibench", "protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn", "--store", store]],
    }]}))  # fmt: skip
    whole = gzip.compress(b"SQLite format 3\x00" + bytes(60_000))
    rows = tmp_path / "rows.db.gz"
    rows.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    _refused(["queue", "add-rows", str(rows), "--store", store, "--plan", str(plan), "--state",
              str(tmp_path / "s.json")], "rows.db.gz is truncated or not a gzip'd store")
