"""Shared fixtures: where the real evaluation data lives, and no test ever reaching the real CIFAR-10 server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import arbibench.data.cifar10 as cifar10_module

REPO_RELATIVE_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data folder: ``$ARBIBENCH_DATA`` if set, else ``shared/data`` beside the repository."""
    env = os.environ.get("ARBIBENCH_DATA")
    path = Path(env) if env else REPO_RELATIVE_DATA
    if not path.is_dir():
        pytest.skip(f"real data folder {path} is absent (set ARBIBENCH_DATA to the folder holding cifar10/)")
    return path


@pytest.fixture(autouse=True)
def _no_real_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing file must fail the test, not start a 160 MB download: point the URL at a closed local port."""
    monkeypatch.setattr(cifar10_module, "CIFAR10_URL", "http://127.0.0.1:9/cifar-10-binary.tar.gz")
