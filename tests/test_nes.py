"""NES on the shipped resnet20_fp and real CIFAR-10 test images: effect, budget, estimator.

Measured when written (seed 0, first 100 test images, 91 classified correctly): ACC* 51% at Linf 8/255 with 100
queries per image and 10 samples per estimate. The threshold below adds a margin to that number.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, NES, Linf, get_attack
from arbibench.data.cifar10 import load_cifar10

EPS = 8 / 255


@pytest.fixture(scope="module")
def data(data_dir: Path, trained_fp: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(100, data_dir=data_dir)
    with torch.no_grad():
        correct = trained_fp(x).argmax(1) == y
    return x, y, correct


def test_nes_linf_lowers_accuracy_within_budget(data, trained_fp: nn.Module) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    threat = Linf(EPS)
    attack = get_attack("nes", max_queries=100, samples=10)
    out = attack.output(trained_fp, x[correct], y[correct], threat, torch.Generator().manual_seed(0))
    x_adv = out.x_adv
    threat.verify(x_adv, x[correct])
    with torch.no_grad():
        fooled = trained_fp(x_adv).argmax(1) != y[correct]
    acc_star = 100.0 * int((~fooled).sum()) / len(y)
    assert 100.0 * float(correct.double().mean()) >= 85.0
    assert acc_star <= 60.0, acc_star  # measured 51%
    counts = out.queries
    assert bool((counts <= 100).all()) and bool((counts >= 1).all())
    # 1 query for the start, then 10 probes + 1 test per iteration: 9 whole iterations fit in 100 queries.
    assert bool((counts[~fooled] == 1 + 9 * 11).all())
    assert torch.equal(torch.isfinite(out.min_distance), fooled)


class LinearModel(nn.Module):
    """Logits linear in the input, class 0 far ahead (never fooled); remembers the last input it was asked about."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(2, 3 * 4 * 4, generator=g), requires_grad=False)
        self.last = torch.empty(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = x.clone()
        return x.flatten(1) @ self.w.t() + torch.tensor([100.0, 0.0])


@pytest.mark.parametrize("sampling", ["gaussian", "rademacher"])
def test_estimate_follows_the_gradient(sampling: str) -> None:
    model = LinearModel().eval()
    x = torch.full((1, 3, 4, 4), 0.5)
    y = torch.zeros(1, dtype=torch.int64)
    # Start, one estimate of 400 probes, the test of the step: the last query is the stepped iterate. The margin
    # loss (logit 1 minus logit 0) has gradient w[1] - w[0], so the Linf step should follow its sign.
    attack = NES(max_queries=402, samples=400, sigma=0.01, momentum=0.0, loss="margin", sampling=sampling)
    out = attack.output(model, x, y, Linf(0.01), torch.Generator().manual_seed(0))
    assert torch.equal(out.x_adv, x) and int(out.queries[0]) == 402
    step = torch.sign((model.last[:1] - x).flatten())  # a one-image query runs as two copies
    grad = model.w[1] - model.w[0]
    agree = step == torch.sign(grad)
    assert float(agree.double().mean()) >= 0.8
    assert bool(agree[grad.abs() > 1.0].all())  # estimation noise may only flip the small coordinates


def test_nes_config_is_validated() -> None:
    assert ATTACKS["nes"] is NES and NES().config.samples == 50 and NES().config.sigma == 0.001
    for bad in ({"samples": 3}, {"sigma": 0.0}, {"momentum": 1.0}, {"loss": "l1"}, {"sampling": "uniform"}):
        with pytest.raises(ValueError):
            get_attack("nes", **bad)
