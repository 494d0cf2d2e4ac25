"""Choosing a backend: local is the runner itself, ray is an optional extra whose absence is one clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.evaluation import executor_registry
from arbibench.evaluation.executor_registry import get_executor
from arbibench.evaluation.executors import ExecutorError


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if Ray were not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(executor_registry.importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name))


def test_local_is_the_runner_itself() -> None:
    assert get_executor("local") is None


def test_ray_without_the_extra_says_how_to_install_it(no_ray: None) -> None:
    with pytest.raises(ExecutorError, match=r"pip install 'arbibench\[ray\]'.*ray==2\.60\.0"):
        get_executor("ray")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"name": "dask"}, "unknown backend 'dask'"),
     ({"address": "auto"}, "--address apply to --backend processes or ray"),
     ({"workers": 4}, "--workers apply to --backend processes or ray"),
     ({"name": "processes", "address": "auto"}, "--address applies to --backend ray"),
     ({"name": "processes", "workers": 0}, "--workers must be a positive integer, got 0")],
)  # fmt: skip
def test_bad_backend_options_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ExecutorError, match=message):
        get_executor(**kwargs)


@pytest.mark.parametrize("command", [["eval", "-m", "resnet20_bnn"], ["sweep", "-m", "resnet20_bnn"],
                                     ["protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn"]])
def test_cli_backend_ray_without_the_extra_is_one_clear_error(no_ray: None, tmp_path: Path, command: list) -> None:
    result = CliRunner().invoke(app, [*command, "--store", str(tmp_path / "r.db"), "--backend", "ray"])
    assert result.exit_code == 2, result.output
    assert "pip install 'arbibench[ray]'" in " ".join(result.output.split())
    assert not (tmp_path / "r.db").exists()  # refused before any work
