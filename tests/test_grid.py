"""The 8-bit threat model: projection onto the k/255 grid inside the eps box, its verification, and attacks on it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import Linf, ThreatModelViolation, get_attack, get_threat_model
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.zoo import load_model

LEVEL = 1 / 255


@pytest.fixture(scope="module")
def cifar(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The first 8 real CIFAR-10 test images (8-bit pixels) and their labels."""
    x, y, _ = load_cifar10(8, data_dir=data_dir)
    return x, y


@pytest.fixture(scope="module")
def bnn() -> nn.Module:
    return load_model("resnet20_bnn").eval()


def _levels(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t.double() * 255)


# -- the projection: pure math on a few pixels ---------------------------------------------------------------------
@pytest.mark.parametrize("reach", [1, 2, 8])
def test_round_to_grid_is_the_nearest_allowed_level(reach: int) -> None:
    """Every pixel lands on the allowed level nearest to it: brute force over the levels in the eps box."""
    g = torch.Generator().manual_seed(reach)
    x = torch.tensor([0, 1, 7, 128, 254, 255], dtype=torch.float32).repeat(50) / 255
    x = x.view(6, 1, 5, 10)
    z = (x + (torch.rand(x.shape, generator=g) * 2 - 1) * (reach + 1.7) / 255).clamp(-0.1, 1.1)
    eps = (reach + 0.5) / 255  # half a level past the last whole one: still `reach` levels
    out = Linf(eps, "uint8").project(z, x)
    base, k = _levels(x), _levels(out)
    assert torch.equal(out, k.float() / 255)  # exactly the loader's float32 k/255
    assert bool(((k - base).abs() <= reach).all()) and bool(((k >= 0) & (k <= 255)).all())
    # brute force: the allowed level nearest to z (ties may go either way, so compare distances)
    allowed = torch.stack([base + d for d in range(-reach, reach + 1)])
    allowed = torch.where((allowed >= 0) & (allowed <= 255), allowed, torch.full_like(allowed, 1e9))
    best = (allowed - z.double() * 255).abs().amin(dim=0)
    assert torch.allclose((k - z.double() * 255).abs(), best, atol=1e-4)


def test_below_one_level_the_grid_is_refused_by_name() -> None:
    # no grid image but the clean one lies within 0.9/255: every attack would leave ACC* = ACC by construction
    with pytest.raises(ValueError, match="below one grey level"):
        Linf(0.9 / 255, "uint8")
    x = torch.full((2, 3, 4, 4), 100 / 255)
    z = x + 1.9 / 255
    assert torch.equal(Linf(1 / 255, "uint8").project(z, x), x + 1 / 255)  # exactly one level: the next one


def test_float_grid_leaves_the_projection_as_it_was() -> None:
    x = torch.full((1, 1, 2, 2), 0.5)
    z = x + 0.3 / 255
    assert torch.equal(Linf(1 / 255).project(z, x), z)
    assert torch.equal(Linf(1 / 255, "float").round_to_grid(z, x), z)


def test_verify_refuses_a_pixel_off_the_grid() -> None:
    """Half a grey level inside eps passes in float and is a violation on uint8, named as such."""
    x = torch.full((3, 1, 2, 2), 10 / 255)
    x_adv = x.clone()
    x_adv[1, 0, 0, 0] += 0.5 / 255
    Linf(8 / 255).verify(x_adv, x)
    with pytest.raises(ThreatModelViolation, match="1 of 3 samples .* 1 off the uint8 grid"):
        Linf(8 / 255, "uint8").verify(x_adv, x)
    Linf(8 / 255, "uint8").verify(x + 8 * LEVEL, x)  # a whole number of levels is on it


def test_grid_names_are_checked() -> None:
    with pytest.raises(ValueError, match="grid must be one of float, uint8"):
        get_threat_model("Linf", 8 / 255, "uint16")
    with pytest.raises(ValueError, match="Linf threat model only"):
        get_threat_model("L2", 0.5, "uint8")


# -- attacks on real images: every output on the grid, inside the box ----------------------------------------------
GRID_ATTACKS = [
    ("fgsm", {}),
    ("pgd", {"steps": 3}),
    ("mifgsm", {"steps": 3}),
    ("apgd_ce", {"steps": 4}),
    ("deepfool", {"steps": 5}),
    ("fab", {"steps": 5}),
    ("square", {"max_queries": 30}),
    ("rays", {"max_queries": 30}),
]


@pytest.mark.parametrize(("name", "params"), GRID_ATTACKS, ids=[a for a, _ in GRID_ATTACKS])
def test_every_attack_lands_on_the_grid(
    name: str, params: dict[str, int], cifar: tuple[torch.Tensor, torch.Tensor], bnn: nn.Module
) -> None:
    x, y = cifar
    threat = Linf(2 / 255, "uint8")
    x_adv = get_attack(name, **params)(bnn, x, y, threat, torch.Generator().manual_seed(0))
    k, base = _levels(x_adv), _levels(x)
    assert bool(((x_adv.double() * 255 - k).abs() < 1e-3).all())
    assert bool(((k - base).abs() <= 2).all())


def test_pgd_moves_on_the_grid_even_when_its_step_is_below_one_level(
    cifar: tuple[torch.Tensor, torch.Tensor], bnn: nn.Module
) -> None:
    """At 1/255 PGD's step (eps / 4) is a quarter level: rounded to the nearest level it would never leave the
    clean image, so on the grid an iterative attack steps by at least one level."""
    x, y = cifar
    attack = get_attack("pgd", steps=3, random_start=False)
    x_adv = attack(bnn, x, y, Linf(1 / 255, "uint8"), torch.Generator().manual_seed(0))
    moved = (_levels(x_adv) - _levels(x)).abs()
    assert float(moved.max()) == 1.0
    assert float((moved == 1).double().mean()) > 0.5


def test_a_float_example_rounded_to_the_grid_is_verified_there(
    cifar: tuple[torch.Tensor, torch.Tensor], bnn: nn.Module
) -> None:
    """What grid-check does with a float example: round it, then it must pass the grid's verification."""
    x, y = cifar
    for eps in (1, 2, 4, 8):
        x_adv = get_attack("pgd", steps=2)(bnn, x, y, Linf(eps / 255), torch.Generator().manual_seed(1))
        rounded = Linf(eps / 255, "uint8").round_to_grid(x_adv, x)
        Linf(eps / 255, "uint8").verify(rounded, x)
        with pytest.raises(ThreatModelViolation, match="off the uint8 grid"):
            Linf(eps / 255, "uint8").verify(x_adv, x)


def test_grid_and_float_threats_differ_only_in_their_grid() -> None:
    pairs = itertools.product(("float", "uint8"), repeat=2)
    for a, b in pairs:
        assert (Linf(8 / 255, a) == Linf(8 / 255, b)) == (a == b)
