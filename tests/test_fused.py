"""The fused path: bit-for-bit the reference model's logits on real CIFAR-10, refused where it cannot be,
and never trusted alone to end an attack."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import Linf
from arbibench.attacks.query import QueryModel
from arbibench.data import load_cifar10
from arbibench.models.architectures import build_model
from arbibench.models.zoo import ZOO, load_model
from arbibench.nn.fused import FusedBinaryConv2d, FusionError, fuse, fused_path

BINARY_ZOO = [name for name, e in ZOO.items() if e.shipped and e.method != "fp"]
# Tolerance on the logits: none. Every product of a fused convolution equals the reference's exactly (module doc).
TOLERANCE = 0.0


def _logits(model: nn.Module, x: torch.Tensor, batch: int = 1000) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + batch]) for i in range(0, len(x), batch)])


@pytest.mark.parametrize("name", BINARY_ZOO)
def test_fused_equals_reference_on_real_images(name: str, data_dir: Path) -> None:
    x, _, _ = load_cifar10(300, data_dir=data_dir)
    model = load_model(name)
    fused = fuse(model)
    assert any(isinstance(m, FusedBinaryConv2d) for m in fused.modules())
    ref, got = _logits(model, x), _logits(fused, x)
    assert float((ref - got).abs().max()) <= TOLERANCE
    assert torch.equal(ref.argmax(1), got.argmax(1))


# The same check over all 10,000 test images is benchmarks/fused_agreement.py (about 8 minutes on 2 cores).


def test_refused_for_torch_sign_models_with_a_note() -> None:
    model = build_model("resnet20", "recu").eval()  # imported presets binarize with torch.sign (0 -> 0)
    with pytest.raises(FusionError, match="torch.sign"):
        fuse(model)
    answered_by, note = fused_path(model)
    assert answered_by is model and note is not None and "refused" in note


def test_refused_in_training_mode_and_without_binary_layers() -> None:
    with pytest.raises(FusionError, match="training mode"):
        fuse(build_model("resnet20", "bnn").train())
    fp = load_model("resnet20_fp")
    with pytest.raises(FusionError, match="no binary layer"):
        fuse(fp)
    assert fused_path(fp) == (fp, None)  # nothing to fuse is no refusal: no note on every FP evaluation


def test_rebuilt_when_the_reference_changes(data_dir: Path) -> None:
    x, _, _ = load_cifar10(16, data_dir=data_dir)
    model = load_model("resnet20_bnn")
    first, note = fused_path(model)
    assert note is None and fused_path(model)[0] is first  # cached
    with torch.no_grad():
        model.fc.bias.add_(1.0)
    second, _ = fused_path(model)
    assert second is not first and torch.equal(_logits(second, x), _logits(model, x))


class _AlwaysWrong(nn.Module):
    """Stands in for a fused path that disagrees with the reference: it predicts class (y + 1) for everything."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.full((x.shape[0],), 1), 10).float()


def test_a_disagreeing_fused_answer_costs_queries_never_a_result(monkeypatch, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    x, y, _ = load_cifar10(8, data_dir=data_dir)
    model = load_model("resnet20_bnn")
    keep = model(x).argmax(1) == y
    x, y = x[keep & (y != 1)], y[keep & (y != 1)]
    monkeypatch.setattr("arbibench.attacks.query.fused_path", lambda m: (_AlwaysWrong(), None))
    oracle = QueryModel(model, x, y, Linf(8 / 255), max_queries=5)
    logits = oracle.scores(x, torch.arange(len(x)))
    assert oracle.discrepancies == len(x)  # every "fooled" answer was contradicted by the reference
    assert torch.equal(logits.argmax(1), y)  # and the attack saw the reference's answer
    assert bool((oracle.success_queries == -1).all()) and bool((oracle.queries == 1).all())
