"""The command line on the shipped models and real CIFAR-10: table, JSON, help, and one clear error per mistake."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.cli import app

runner = CliRunner()


@pytest.fixture
def env(data_dir, monkeypatch):
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "160")


def test_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("eval", "train", "recalibrate", "zoo"):
        assert command in result.output
    for command in (["eval", "--help"], ["train", "--help"], ["recalibrate", "--help"], ["zoo", "list", "--help"],
                    ["zoo", "table", "--help"]):
        assert runner.invoke(app, command).exit_code == 0


def test_eval_prints_table_and_writes_json(env, tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        ["eval", "--model", "resnet20_fp", "--attacks", "fgsm,pgd", "-n", "60", "--store", str(tmp_path / "s.db"),
         "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for label in ("clean (ACC)", "fgsm (ACC*)", "pgd (ACC*)", "worst case", "RS (sum over 2 attacks", "RS_mean"):
        assert label in result.output
    d = json.loads(out.read_text())
    assert d["n_examples"] == 60 and d["indices"] == list(range(60))
    assert set(d["attacks"]) == {"fgsm", "pgd"}
    assert isinstance(d["acc"], float) and isinstance(d["rs"], float)
    assert d["attacks"]["pgd"]["acc_star"] <= d["attacks"]["fgsm"]["acc_star"] + 0.05
    assert d["worst_case_acc"] <= min(m["acc_star"] for m in d["attacks"].values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "resnet20_fp", "--eps", "0"], "eps"),
        (["--model", "resnet20_fp", "--eps", "-8/255"], "eps"),
        (["--model", "resnet20_fp", "--eps", "banana"], "eps"),
        (["--model", "resnet20_fp", "--eps", "2"], "eps"),
        (["--model", "resnet20_xyz"], "known models"),
        (["--model", "resnet20_fp", "--attacks", "fgsm,nosuch"], "nosuch"),
        (["--model", "resnet20_fp", "--dataset", "mnist"], "known datasets"),
        (["--model", "resnet20_fp", "-n", "20000"], "holds only 10000"),
        (["--model", "resnet20_fp", "-n", "0"], "positive"),
        (["--model", "resnet20_fp", "--threat-model", "L7"], "L7"),
        (["--model", "resnet20_fp", "--batch-size", "0"], "batch_size"),
    ],
)
def test_bad_input_gives_one_clear_error(env, tmp_path, args, message):
    store = tmp_path / "s.db"
    result = runner.invoke(app, ["eval", *args, "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert "error" in result.output.lower()
    assert message in result.output
    assert "Traceback" not in result.output


def test_zoo_list_shows_the_shipped_models(env):
    result = runner.invoke(app, ["zoo", "list"])
    assert result.exit_code == 0
    for name in ("resnet20_fp", "resnet20_bnn"):
        assert name in result.output
    assert "missing" not in result.output


def test_train_with_unknown_method_is_one_clear_error(tmp_path):
    result = runner.invoke(app, ["train", "--method", "ternary", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown method 'ternary'" in result.output and "fp" in result.output
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_step_one_epochs_on_a_one_step_recipe_is_one_clear_error(tmp_path):
    result = runner.invoke(app, ["train", "--method", "bnn", "--step1-epochs", "0", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--step1-epochs applies to the two-step recipes" in result.output
    assert not any(tmp_path.iterdir())


def test_recalibrating_an_adversarially_trained_model_is_one_clear_error(tmp_path):
    result = runner.invoke(app, ["recalibrate", "resnet20_fp_at", "--out", str(tmp_path), "--export"])
    assert result.exit_code == 2
    assert "adversarially trained" in result.output and "recalibrate standard models only" in result.output
    assert not any(tmp_path.iterdir())


def test_autoattack_reports_what_it_ran(env, tmp_path):
    out = tmp_path / "aa.json"
    result = runner.invoke(
        app, ["eval", "-m", "resnet20_fp", "--attacks", "autoattack", "-n", "20", "--store", str(tmp_path / "s.db"),
              "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    config = json.loads(out.read_text())["attacks"]["autoattack"]["config"]
    ran = [c["name"] for c in config["components"]]
    assert ran[:2] == ["apgd_ce", "apgd_t"]
    assert set(ran) | set(config["skipped"]) == {"apgd_ce", "apgd_t", "fab_t", "square"}
    if config["skipped"]:
        assert f"not available yet: {', '.join(config['skipped'])}" in result.output


def test_piped_output_gets_room_for_wide_tables(data_dir):
    """Redirected to a file or a pipe (no terminal, no COLUMNS), `zoo list` prints whole cells, not 80 columns."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"ARBIBENCH_DATA": str(data_dir)}
    command = [str(Path(sys.executable).parent / "arbibench"), "zoo", "list"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert "checkpoint present" in out and "resnet20_reactnet_at" in out
    assert max(len(line) for line in out.splitlines()) > 80
