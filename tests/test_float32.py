"""On CUDA evaluation and training compute in full float32: cuDNN's TF32 default would evaluate (or train) another
network."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from arbibench.machine import full_float32


@pytest.fixture
def saved_precision() -> Iterator[None]:
    conv, matmul = torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision
    yield
    torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision = conv, matmul


def test_full_float32_turns_tf32_off_for_convolutions_and_matrix_products(saved_precision: None) -> None:
    torch.backends.cudnn.conv.fp32_precision = "tf32"  # torch's default for cuDNN convolutions
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    full_float32()
    assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"


def test_resolving_a_cuda_device_sets_full_float32(saved_precision: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from arbibench.evaluation.inputs import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a machine with a GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert resolve_device("cpu") == torch.device("cpu")
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # a CPU run leaves the process's settings alone


def test_training_on_cuda_sets_full_float32_and_every_run_asks_for_its_device(
    saved_precision: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path
) -> None:
    from arbibench.train import Recipe, loop, train
    from arbibench.train.execution import float32_precision

    torch.backends.cudnn.conv.fp32_precision = "tf32"
    float32_precision(torch.device("cpu"))
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # a CPU run leaves the CUDA settings alone
    float32_precision(torch.device("cuda"))  # only sets flags: no GPU needed
    assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    asked: list[torch.device] = []
    monkeypatch.setattr(loop, "float32_precision", asked.append)
    recipe = Recipe(method="bnn", epochs=1, batch_size=64, train_examples=64, optimizer="adam", lr=1e-3)
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=50)
    assert asked == [torch.device("cpu")]
