"""Shared fixtures: where the real evaluation data lives, and no test ever reaching the real CIFAR-10 server."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import arbibench.data.cifar10 as cifar10_module
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.resnet import resnet20

REPO_RELATIVE_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The files with the most test seconds (pytest --durations=0 on the 2-core machine, 2026-12-06), longest first.
# `make test` hands whole files to two workers in collection order (--dist loadfile --no-loadscope-reorder), so these
# start first and the short files fill in around them, instead of a long file starting last and running alone at the
# end.
LONGEST_FIRST = (
    "test_ray_executor.py", "test_faults.py", "test_train.py", "test_leaderboard.py", "test_process_executor.py",
    "test_train_device.py", "test_kd_recipe.py", "test_torchattacks_crosscheck.py", "test_protocol_progress.py",
    "test_findings.py", "test_lab_queue.py", "test_protocol.py", "test_square.py", "test_min_perturbation.py",
    "test_import_equivalence.py", "test_whitebox_effect.py", "test_attack_contract.py", "test_validation_split.py",
    "test_deploy_models.py", "test_zoo.py", "test_pooled.py", "test_cw_l2_deepfool.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; every other file after them, in collection order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: tests keep their order in a file

# The CLI console fixes its width once, when arbibench.terminal is first imported (the collection of the test files
# below): from COLUMNS if set, else 200 columns, as for any output that is not a terminal. pytest-xdist workers start
# with COLUMNS=80, which would squeeze every table into 80 columns.
os.environ.pop("COLUMNS", None)


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


@pytest.fixture(autouse=True)
def _no_user_model_folder(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Models the developer imported into ~/.cache/arbibench/models must not change what a test sees."""
    monkeypatch.setenv("ARBIBENCH_MODELS", str(tmp_path_factory.getbasetemp() / "no_user_models"))


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> Iterator[None]:
    """Test batches are tiny: one intra-op thread is as fast, and far faster when other jobs share the CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def images(data_dir: Path) -> torch.Tensor:
    """The first 8 real CIFAR-10 test images."""
    x, _, _ = load_cifar10(8, data_dir=data_dir)
    return x


@pytest.fixture(scope="module", params=["fp", "bnn"])
def model(request: pytest.FixtureRequest) -> nn.Module:
    """A random-init ResNet-20, full precision and binarized: for structural attack tests that need no training."""
    torch.manual_seed(0)
    return resnet20(request.param).eval()


@pytest.fixture(scope="session")
def trained_fp() -> nn.Module:
    """The shipped full-precision ResNet-20 (91.5% clean): attacks must break it."""
    from arbibench.models.zoo import load_model

    return load_model("resnet20_fp")


class GradBatchRecorder(nn.Module):
    """Wraps a model and records the batch size of every forward pass that builds a graph (early-exit tests)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            self.sizes.append(x.shape[0])
        return self.inner(x)


@pytest.fixture(scope="session")
def grad_batches() -> type[GradBatchRecorder]:
    """The :class:`GradBatchRecorder` class: ``net = grad_batches(model)``, then read ``net.sizes``."""
    return GradBatchRecorder


class OneHot(nn.Module):
    """The model's top-1 label as a one-hot vector: scores that carry nothing beyond the label."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.inner(x)
        return nn.functional.one_hot(logits.argmax(1), logits.shape[1]).float()


class Counting(nn.Module):
    """Counts the images it is asked to classify (a one-image query runs as two copies of it: counted once)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.images = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.images += 1 if x.shape[0] == 2 and x.stride(0) == 0 else x.shape[0]
        return self.inner(x)


def with_value(data: dict, where: list, value: object) -> dict:
    """A deep copy of a decoded card with the field at path ``where`` (keys and list indices) set to ``value``: the
    corrupted copies the card-parsing tests feed in."""
    bad = copy.deepcopy(data)
    target = bad
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    return bad
