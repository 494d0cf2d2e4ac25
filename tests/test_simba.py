"""SimBA-DCT on the shipped resnet20_fp and real CIFAR-10 test images: effect, budget, early exit.

Measured when written (seed 0, first 100 test images, 91 classified correctly): ACC* 59% at Linf 8/255 with 100
queries per image (52% with 200, 41% with 500). The threshold below adds a margin to the 100-query number.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, Linf, SimBA, get_attack
from arbibench.attacks.simba import dct_matrix, low_frequency_order
from arbibench.data.cifar10 import load_cifar10

EPS = 8 / 255
QUERIES = 100


class RowCounter(nn.Module):
    """Counts the images of every forward pass."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += 1 if x.shape[0] == 2 and x.stride(0) == 0 else x.shape[0]  # a one-image query runs as 2 copies
        return self.inner(x)


@pytest.fixture(scope="module")
def data(data_dir: Path, trained_fp: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(100, data_dir=data_dir)
    with torch.no_grad():
        correct = trained_fp(x).argmax(1) == y
    return x, y, correct


def test_simba_linf_lowers_accuracy_within_budget(data, trained_fp: nn.Module) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    threat = Linf(EPS)
    attack = get_attack("simba", max_queries=QUERIES)
    net = RowCounter(trained_fp).eval()
    out = attack.output(net, x[correct], y[correct], threat, torch.Generator().manual_seed(0))
    x_adv = out.x_adv
    threat.verify(x_adv, x[correct])
    with torch.no_grad():
        fooled = trained_fp(x_adv).argmax(1) != y[correct]
    acc_star = 100.0 * int((~fooled).sum()) / len(y)
    assert 100.0 * float(correct.double().mean()) >= 85.0
    assert acc_star <= 67.0, acc_star  # measured 59%
    assert bool((out.queries <= QUERIES).all()) and bool((out.queries >= 1).all())
    assert torch.equal(torch.isfinite(out.min_distance), fooled)
    assert bool((out.min_distance[fooled] <= EPS + 1e-6).all())
    assert bool((out.queries[~fooled] == QUERIES).all())  # robust samples spent the whole budget
    # Early exit: a fooled sample is never queried again, so the model saw exactly the counted queries.
    assert net.rows == int(out.queries.sum())


def test_dct_basis_and_low_frequency_order() -> None:
    d = dct_matrix(32)
    assert torch.allclose(d @ d.t(), torch.eye(32, dtype=torch.float64), atol=1e-10)
    order = low_frequency_order(3, 32, 32, 8, 4, torch.Generator().manual_seed(0))
    assert sorted(order.tolist()) == list(range(3 * 32 * 32))
    freq = order % (32 * 32)
    ring = torch.maximum(freq // 32, freq % 32)
    assert bool((ring[: 3 * 8 * 8] < 8).all())  # the low-frequency block of every channel comes first
    assert bool((ring[3 * 8 * 8 : 3 * 12 * 12] < 12).all()) and bool((ring[3 * 12 * 12 :] >= 12).all())
    assert len({int(c) for c in order[: 3 * 8 * 8] // (32 * 32)}) == 3


def test_config_validation() -> None:
    assert ATTACKS["simba"] is SimBA and SimBA().config.max_queries == 10000
    for bad in ({"max_queries": 0}, {"freq_dims": 0}, {"step_linf": 1.5}, {"step_l2": -1.0}, {"stride": 2.5}):
        with pytest.raises(ValueError):
            get_attack("simba", **bad)
