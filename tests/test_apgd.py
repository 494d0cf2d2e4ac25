"""APGD-CE, APGD-DLR and APGD-T: the checkpoint schedule, step halving, early exit, targets, the registry, and (with the
trained zoo checkpoint) the effect AutoAttack's attacks are known for. The contract every attack keeps (verified
results, determinism, model untouched, early exit) is in tests/test_attack_contract.py.

Structural tests use randomly initialised ResNet-20s (full precision and binarized) on real CIFAR-10 test images,
labelled with the model's own predictions; small hand-made models give closed forms.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from arbibench.attacks import (
    APGD,
    APGDDLR,
    APGDT,
    ATTACKS,
    L2,
    PGD,
    Linf,
    apgd_checkpoints,
    apgd_should_halve,
    get_attack,
)
from arbibench.attacks.base import predict
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.resnet import resnet20


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- the schedule ----------------------------------------------------------------------------------------------------
def test_checkpoints_for_100_steps() -> None:
    # p = 0, .22, .41, .57, .70, .80, .87, .93, .99 (next: 1.05 > 1)
    assert apgd_checkpoints(100) == [0, 22, 41, 57, 70, 80, 87, 93, 99]


@pytest.mark.parametrize("steps", [1, 5, 20, 37, 100, 1000])
def test_checkpoints_follow_the_formula(steps: int) -> None:
    p = [0.0, 0.22]
    while True:
        nxt = p[-1] + max(p[-1] - p[-2] - 0.03, 0.06)
        if nxt > 1 + 1e-9:
            break
        p.append(nxt)
    expected = sorted({math.ceil(round(pj * steps, 9)) for pj in p})
    got = apgd_checkpoints(steps)
    assert got == expected
    assert got[0] == 0 and got[-1] <= steps and got == sorted(set(got))


def test_should_halve_conditions() -> None:
    n_up = torch.tensor([5, 6, 10, 10, 10])
    halved = torch.tensor([False, False, False, True, False])
    best = torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0])
    at_check = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0])
    got = apgd_should_halve(n_up, 8, 0.75, halved, best, at_check)
    # 5 < 6 = 0.75 * 8 (condition 1); 6 is not < 6; no progress since a check without halving (condition 2);
    # no progress but halved last time; progress
    assert got.tolist() == [True, False, True, False, False]


# -- closed forms on hand-made models --------------------------------------------------------------------------------
class _Hopeless(nn.Module):
    """K classes; class 0 wins by >= 2 for any input in [0, 1] and class 1 is the runner-up, so that the CE, margin,
    DLR and targeted DLR (target 1) losses all rise as the pixel sum s falls (targets 2.. give a constant loss)."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.classes = classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.flatten(1).sum(dim=1)
        rest = [torch.full_like(s, -50.0)] * (self.classes - 2)
        return torch.stack([2.0 + s, -s, *rest], dim=1)


@pytest.mark.parametrize("name", ["apgd_ce", "apgd_dlr", "apgd_t"])
def test_never_fooled_returns_best_loss_point(name: str) -> None:
    x = torch.full((3, 1, 2, 2), 0.5)
    y = torch.zeros(3, dtype=torch.int64)
    eps = 0.2
    net = _Hopeless().eval()
    linf = get_attack(name, steps=10)(net, x, y, Linf(eps), gen())
    torch.testing.assert_close(linf, x - eps, atol=1e-6, rtol=0)  # the corner of the box with the lowest sum
    l2 = get_attack(name, steps=30)(net, x, y, L2(eps), gen())
    # the L2 point of lowest sum: every pixel down by eps / sqrt(4), up to project's 1e-5 margin and the search
    torch.testing.assert_close(l2, x - eps / 2, atol=5e-3 * eps, rtol=0)


class _Bowl(nn.Module):
    """Never fooled; the margin loss -||x - c||^2 - 10 peaks at ``c``, strictly inside the threat model."""

    def __init__(self, centre: torch.Tensor) -> None:
        super().__init__()
        self.centre = centre

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d2 = (x - self.centre).flatten(1).pow(2).sum(dim=1)
        return torch.stack([torch.full_like(d2, 10.0), -d2, torch.full_like(d2, -100.0)], dim=1)


@pytest.mark.parametrize("threat", [Linf(0.2), L2(0.5)], ids=["Linf", "L2"])
def test_step_halving_homes_in_on_an_interior_maximum(threat: Linf | L2) -> None:
    # The first step is 2 eps, far longer than the distance to the peak: only halving (up to 8 times in 100 steps,
    # down to 2 eps / 256) lets the best iterate come within a hundredth or so of eps of it.
    x = torch.full((4, 1, 4, 4), 0.5)
    offset = torch.linspace(-1, 1, 16).view(1, 1, 4, 4)
    offset = 0.3 * threat.eps * offset / (offset.abs().max() if isinstance(threat, Linf) else offset.norm())
    centre = x + offset
    net = _Bowl(centre).eval()
    y = torch.zeros(4, dtype=torch.int64)
    got = APGD(loss="margin")(net, x, y, threat, gen())
    assert float(threat.distance(got, centre).max()) < 0.02 * threat.eps
    # constant-step PGD with the same first step stays far off
    pgd = PGD(steps=100, rel_stepsize=2.0, loss="margin")(net, x, y, threat, gen())
    assert float(threat.distance(pgd, centre).min()) > 0.05 * threat.eps


# -- early exit and targets ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["apgd_ce", "apgd_t"])
def test_early_exit_keeps_adversarial_points(grad_batches: type[nn.Module], images: torch.Tensor, name: str) -> None:
    torch.manual_seed(0)
    net = grad_batches(resnet20("bnn")).eval()
    x = images
    y = predict(net, x)
    half = len(y) // 2
    y[:half] = (y[:half] + 1) % 10  # half the batch starts misclassified
    x_adv = get_attack(name, steps=4)(net, x, y, Linf(1 / 255), gen())  # small eps: not all fall at the start
    assert torch.equal(x_adv[:half], x[:half])  # misclassified on arrival: the clean point is kept
    assert bool((predict(net, x_adv) != y).sum() >= half)
    # gradients only for samples not yet fooled: the batch never grows and soon shrinks
    assert net.sizes[0] == len(y) - half
    assert net.sizes == sorted(net.sizes, reverse=True)
    assert min(net.sizes) < len(y) - half


def test_restarts_each_run_steps_plus_one_gradients(grad_batches: type[nn.Module]) -> None:
    net = grad_batches(_Hopeless(5)).eval()
    x = torch.full((2, 1, 2, 2), 0.5)
    y = torch.zeros(2, dtype=torch.int64)
    APGD(steps=6, restarts=3)(net, x, y, Linf(0.1), gen())
    assert net.sizes == [2] * (3 * 7)  # the start and each step, per restart
    net.sizes.clear()
    # 5 classes: at most 4 targets however many are asked for, each with its own restarts
    APGDT(steps=6, restarts=2, n_target_classes=9)(net, x, y, Linf(0.1), gen())
    assert net.sizes == [2] * (4 * 2 * 7)


class _TargetRecorder(APGDT):
    """APGD-T that records the targets of each run."""

    targets: list[list[int]]

    def _search(self, model: nn.Module, x0: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, *rest: Any):
        assert target is not None
        self.targets.append(target.tolist())
        return super()._search(model, x0, y, target, *rest)


def test_apgd_t_targets_most_likely_other_classes_in_order() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 6)).eval()
    with torch.no_grad():
        net[1].bias.copy_(torch.tensor([0.0, 50.0, 10.0, 30.0, 20.0, 40.0]))  # class 1 wins far from any boundary
    x = torch.rand(3, 1, 2, 2, generator=gen(1))
    y = torch.ones(3, dtype=torch.int64)
    attack = _TargetRecorder(steps=2, n_target_classes=3, restarts=2)
    attack.targets = []
    attack(net, x, y, Linf(0.01), gen())
    assert attack.targets == [[5, 5, 5]] * 2 + [[3, 3, 3]] * 2 + [[4, 4, 4]] * 2


# -- registry and configs --------------------------------------------------------------------------------------------
def test_registry_and_defaults() -> None:
    assert ATTACKS["apgd_ce"] is APGD and ATTACKS["apgd_dlr"] is APGDDLR and ATTACKS["apgd_t"] is APGDT
    assert all(cls.needs_gradients for cls in (APGD, APGDDLR, APGDT))
    ce = get_attack("APGD_CE").config_dict()
    assert ce == {
        "name": "apgd_ce",
        "steps": 100,
        "restarts": 1,
        "loss": "ce",
        "rho": 0.75,
        "eot_iter": 1,
        "loss_temperature": 1.0,
    }
    assert get_attack("apgd_dlr").config_dict() == {**ce, "name": "apgd_dlr", "loss": "dlr"}
    t = get_attack("apgd_t").config_dict()
    assert t == {
        "name": "apgd_t",
        "steps": 100,
        "restarts": 1,
        "n_target_classes": 9,
        "rho": 0.75,
        "eot_iter": 1,
        "loss_temperature": 1.0,
    }
    assert json.loads(json.dumps(t)) == t


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("apgd_ce", {"steps": 0}, "steps must be an integer >= 1"),
        ("apgd_ce", {"rho": 0.0}, r"rho must be a number in \(0, 1\]"),
        ("apgd_ce", {"rho": 1.5}, "rho must be"),
        ("apgd_ce", {"loss": "hinge"}, "loss must be one of"),
        ("apgd_dlr", {"eot_iter": 0}, "eot_iter must be an integer >= 1"),
        ("apgd_ce", {"loss_temperature": 0.0}, "loss_temperature must be a finite number > 0"),
        ("apgd_t", {"n_target_classes": 0}, "n_target_classes must be an integer >= 1"),
        ("apgd_t", {"loss": "ce"}, "unknown parameter 'loss' for attack 'apgd_t'"),
        ("apgd_t", {"restarts": 0}, "restarts must be an integer >= 1"),
    ],
)
def test_bad_params_name_the_param(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_attack(name, **params)


def test_apgd_t_needs_four_classes() -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3)).eval()
    x = torch.full((2, 1, 2, 2), 0.5)
    with pytest.raises(ValueError, match="K >= 4"):
        APGDT(steps=2)(net, x, predict(net, x), Linf(0.1), gen())


# -- effect on the trained zoo model -------------------------------
@pytest.fixture(scope="module")
def first200(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(200, data_dir=data_dir)
    return x, y


def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((predict(net, x) == y).float().mean())


@pytest.fixture(scope="module")
def apgd_ce_linf(trained_fp: nn.Module, first200: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = first200
    return APGD()(trained_fp, x, y, Linf(8 / 255), gen())


def test_trained_apgd_ce_linf(
    trained_fp: nn.Module, first200: tuple[torch.Tensor, torch.Tensor], apgd_ce_linf: torch.Tensor
) -> None:
    x, y = first200
    assert _accuracy(trained_fp, x, y) > 0.5
    assert _accuracy(trained_fp, apgd_ce_linf, y) < 0.05


@pytest.mark.parametrize("eps_255,n", [(8, 200), (1, 100)], ids=["8/255", "1/255-first100"])
def test_trained_apgd_ce_at_least_as_strong_as_pgd10(
    trained_fp: nn.Module,
    first200: tuple[torch.Tensor, torch.Tensor],
    apgd_ce_linf: torch.Tensor,
    eps_255: int,
    n: int,
) -> None:
    # At 8/255 both leave (almost) nothing; at 1/255 PGD-10 leaves a quarter of the points, so the comparison bites.
    x, y = first200[0][:n], first200[1][:n]
    threat = Linf(eps_255 / 255)
    apgd = apgd_ce_linf if eps_255 == 8 else APGD()(trained_fp, x, y, threat, gen())
    pgd = PGD()(trained_fp, x, y, threat, gen())
    assert _accuracy(trained_fp, apgd, y) <= _accuracy(trained_fp, pgd, y)


@pytest.mark.parametrize("attack", [APGDDLR(), APGDT()], ids=["apgd_dlr", "apgd_t"])
def test_trained_apgd_dlr_and_t_linf(
    trained_fp: nn.Module, first200: tuple[torch.Tensor, torch.Tensor], attack: APGD
) -> None:
    x, y = first200
    assert _accuracy(trained_fp, attack(trained_fp, x, y, Linf(8 / 255), gen()), y) < 0.05


def test_trained_apgd_ce_l2_lowers_accuracy(trained_fp: nn.Module, first200: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = first200
    clean = _accuracy(trained_fp, x, y)
    assert _accuracy(trained_fp, APGD()(trained_fp, x, y, L2(0.5), gen()), y) <= clean - 0.30
