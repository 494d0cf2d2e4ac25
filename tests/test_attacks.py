"""FGSM and PGD: closed forms, the random start, early exit, the contract around run(), the registry.

What every attack must do (verified results, determinism, the model left untouched, early exit on the registry's
tiny budgets) is tested once for all in tests/test_attack_contract.py; this file keeps what is specific to these two.

Most tests use randomly initialised ResNet-20s (full precision and binarized) on real CIFAR-10 test images, with the
model's own predictions as labels so that every sample starts correctly classified and the attack has work to do.
The tests at the end need the trained zoo checkpoint and check that the attacks have their well-known effect.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import (
    ATTACKS,
    FGSM,
    L2,
    PGD,
    Attack,
    Linf,
    ThreatModel,
    ThreatModelViolation,
    get_attack,
)
from arbibench.attacks.base import AttackOutput, predict
from arbibench.attacks.losses import cross_entropy, margin
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.resnet import resnet20

THREATS = {"Linf": Linf(8 / 255), "L2": L2(0.5)}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def images(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(8, data_dir=data_dir)
    return x, y


def own_labels(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's predictions: every sample starts correctly classified."""
    return predict(model, x)


def linear_model(seed: int = 0, classes: int = 3, pixels: int = 4) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(pixels, classes)).eval()


# -- randomness (same seed, same result: tests/test_attack_contract.py) ----------------------------------------------
def test_random_start_comes_from_the_generator(model: nn.Module, images: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, _ = images
    y = own_labels(model, x)
    attack = PGD(steps=2)
    assert not torch.equal(attack(model, x, y, Linf(8 / 255), gen(7)), attack(model, x, y, Linf(8 / 255), gen(8)))


def test_training_mode_model_rejected(images: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = images
    net = resnet20("fp").train()
    with pytest.raises(ValueError, match="training mode"):
        FGSM()(net, x, y, Linf(8 / 255), gen())
    assert net.training  # and its mode is not silently changed


# -- closed forms ----------------------------------------------------------------------------------------------------
def _linear_gradient(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d CE / d x for logits W x + b, written out: (softmax - onehot) W."""
    lin = net[1]
    flat = x.flatten(1).double()
    w, b = lin.weight.double(), lin.bias.double()
    p = torch.softmax(flat @ w.T + b, dim=1)
    onehot = torch.nn.functional.one_hot(y, w.shape[0]).double()
    return ((p - onehot) @ w).reshape(x.shape)


def test_fgsm_linf_matches_closed_form() -> None:
    net = linear_model()
    x = torch.rand(16, 1, 2, 2, generator=gen(1)) * 0.6 + 0.2
    y = torch.randint(0, 3, (16,), generator=gen(2))
    eps = 0.1
    expected = (x.double() + eps * torch.sign(_linear_gradient(net, x, y))).clamp(0, 1).float()
    got = FGSM()(net, x, y, Linf(eps), gen())
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_fgm_l2_matches_closed_form() -> None:
    net = linear_model()
    x = torch.rand(16, 1, 2, 2, generator=gen(1)) * 0.6 + 0.2
    y = torch.randint(0, 3, (16,), generator=gen(2))
    eps = 0.1
    g = _linear_gradient(net, x, y).flatten(1)
    expected = (x.double().flatten(1) + eps * g / g.norm(dim=1, keepdim=True)).reshape(x.shape).float()
    got = FGSM()(net, x, y, L2(eps), gen())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)  # project aims 1e-5 (relative) inside the ball


def test_pgd_single_full_step_equals_fgsm(model: nn.Module, images: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, _ = images
    y = own_labels(model, x)
    threat = Linf(8 / 255)
    fgsm = FGSM()(model, x, y, threat, gen())
    pgd = PGD(steps=1, rel_stepsize=1.0, random_start=False)(model, x, y, threat, gen())
    assert torch.equal(pgd, fgsm)


class _HopelessModel(nn.Module):
    """Class 0 wins by a margin >= 10 for any input in [0, 1]: no attack can succeed, yet the gradient is not 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.flatten(1).sum(dim=1)
        return torch.stack([10.0 + s, -s], dim=1)


@pytest.mark.parametrize("schedule,total", [("constant", 0.75), ("cosine", 0.5)])
def test_pgd_never_fooled_returns_last_iterate(schedule: str, total: float) -> None:
    # CE pushes every pixel down by one step per iteration: 3 steps of eps/4 (constant) or eps/4 * (1 + .75 + .25)
    # (cosine: factors 0.5 * (1 + cos(pi k / 3)) for k = 0, 1, 2).
    x = torch.full((2, 1, 2, 2), 0.5)
    y = torch.zeros(2, dtype=torch.int64)
    eps = 0.2
    got = PGD(steps=3, random_start=False, step_schedule=schedule)(_HopelessModel().eval(), x, y, Linf(eps), gen())
    torch.testing.assert_close(got, x - total * eps, atol=1e-6, rtol=0)


# -- early exit ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("random_start", [False, True])
def test_pgd_early_exit_keeps_adversarial_points(
    grad_batches: type[nn.Module], images: tuple[torch.Tensor, torch.Tensor], random_start: bool
) -> None:
    torch.manual_seed(0)
    net = grad_batches(resnet20("bnn")).eval()
    x, _ = images
    y = own_labels(net, x)
    y[: len(y) // 2] = (y[: len(y) // 2] + 1) % 10  # half the batch starts misclassified
    x_adv = PGD(steps=4, random_start=random_start)(net, x, y, Linf(8 / 255), gen())
    wrong_at_start = torch.arange(len(y)) < len(y) // 2
    # an already misclassified sample keeps its clean point: the first adversarial iterate is the start itself
    assert torch.equal(x_adv[wrong_at_start], x[wrong_at_start])
    fooled = predict(net, x_adv) != y
    assert bool(fooled[wrong_at_start].all())
    # gradients are only ever computed for samples not yet fooled, so the batch never grows and soon shrinks
    # (with a random start, the clean check drops the misclassified ones before the first gradient)
    assert net.sizes[0] == len(y) - (int(wrong_at_start.sum()) if random_start else 0)
    assert net.sizes == sorted(net.sizes, reverse=True)
    assert max(net.sizes[1:], default=0) < len(y)


def test_pgd_more_restarts_never_worse(images: tuple[torch.Tensor, torch.Tensor]) -> None:
    torch.manual_seed(1)
    net = resnet20("bnn").eval()
    x, y = images  # true labels: a weak untrained model, some already wrong
    threat = L2(0.05)  # small budget so that not everything falls in one restart
    one = predict(net, PGD(steps=2, restarts=1)(net, x, y, threat, gen(3))) != y
    three = predict(net, PGD(steps=2, restarts=3)(net, x, y, threat, gen(3))) != y
    assert bool((three | ~one).all())  # the first restart is the same run, and its successes are kept


# -- the contract around run() ---------------------------------------------------------------------------------------
class _Cheater(Attack):
    """Returns whatever it was told to: stands in for a buggy attack."""

    name = "cheater"
    needs_gradients = False

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset

    def run(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
    ) -> torch.Tensor:
        return (x + self.offset).clamp(0, 1) if math.isfinite(self.offset) else x + self.offset


def test_attack_must_implement_run_or_run_output() -> None:
    # run and run_output default to each other, so an attack with neither would recurse without end
    with pytest.raises(TypeError, match="must implement run or run_output"):

        class _Empty(Attack):
            name = "empty"

    class _OutputOnly(Attack):
        name = "output_only"

        def run_output(
            self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
        ) -> AttackOutput:
            return AttackOutput(x.clone(), min_distance=torch.full((x.shape[0],), 0.5, dtype=torch.float64))

    x = torch.full((3, 1, 2, 2), 0.5)
    out = _OutputOnly().run(linear_model(), x, torch.zeros(3, dtype=torch.int64), Linf(8 / 255), gen())
    assert torch.equal(out, x)  # run answers from run_output


@pytest.mark.parametrize("offset", [2 * 8 / 255, math.nan])
def test_violating_attack_raises_through_call(offset: float) -> None:
    net = linear_model()
    x = torch.full((3, 1, 2, 2), 0.5)
    y = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ThreatModelViolation, match="3 of 3 samples"):
        _Cheater(offset)(net, x, y, Linf(8 / 255), gen())
    _Cheater(8 / 255)(net, x, y, Linf(8 / 255), gen())  # exactly on the boundary is allowed


@pytest.mark.parametrize(
    "x,y,match",
    [
        (torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64), "4-D float"),
        (torch.zeros(2, 1, 2, 2, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64), "4-D float"),
        (torch.zeros(2, 1, 2, 2), torch.zeros(2, dtype=torch.int32), "1-D int64"),
        (torch.zeros(2, 1, 2, 2), torch.zeros(2, 1, dtype=torch.int64), "1-D int64"),
        (torch.zeros(2, 1, 2, 2), torch.zeros(3, dtype=torch.int64), "2 samples but y has 3"),
        (torch.full((2, 1, 2, 2), 255.0), torch.zeros(2, dtype=torch.int64), r"in \[0, 1\]"),
        (torch.full((2, 1, 2, 2), math.nan), torch.zeros(2, dtype=torch.int64), "finite"),
    ],
)
def test_inputs_validated(x: torch.Tensor, y: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FGSM()(linear_model(), x, y, Linf(0.1), gen())


def test_empty_batch_and_bad_threat_or_generator() -> None:
    net = linear_model()
    empty = FGSM()(net, torch.zeros(0, 1, 2, 2), torch.zeros(0, dtype=torch.int64), Linf(0.1), gen())
    assert empty.shape == (0, 1, 2, 2)
    x, y = torch.full((1, 1, 2, 2), 0.5), torch.zeros(1, dtype=torch.int64)
    with pytest.raises(TypeError, match="ThreatModel"):
        FGSM()(net, x, y, 0.1, gen())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Generator"):
        PGD()(net, x, y, Linf(0.1), 0)  # type: ignore[arg-type]


# -- registry and configs --------------------------------------------------------------------------------------------
def test_registry_and_config_dict() -> None:
    assert set(ATTACKS) >= {"fgsm", "pgd"}
    assert all(cls.needs_gradients for cls in (FGSM, PGD))
    pgd = get_attack("PGD", steps=20, step_schedule="cosine")
    assert isinstance(pgd, PGD)
    d = pgd.config_dict()
    assert d == {
        "name": "pgd",
        "steps": 20,
        "rel_stepsize": 0.25,
        "random_start": True,
        "restarts": 1,
        "step_schedule": "cosine",
        "loss": "ce",
    }
    assert json.loads(json.dumps(d, sort_keys=True)) == d  # the store can hash it
    assert get_attack("fgsm").config_dict() == {"name": "fgsm", "loss": "ce"}
    assert PGD(config=pgd.config).config == pgd.config
    with pytest.raises(dataclasses.FrozenInstanceError):
        pgd.config.steps = 3  # type: ignore[misc]


def test_get_attack_unknown_name_lists_known() -> None:
    with pytest.raises(ValueError, match=r"unknown attack 'cw'; known: .*fgsm, .*pgd"):
        get_attack("cw")


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("pgd", {"stepz": 3}, r"unknown parameter 'stepz' for attack 'pgd'; known: steps, rel_stepsize"),
        ("fgsm", {"steps": 3}, r"unknown parameter 'steps' for attack 'fgsm'"),
        ("pgd", {"steps": 0}, "steps must be an integer >= 1"),
        ("pgd", {"steps": 2.5}, "steps must be an integer"),
        ("pgd", {"rel_stepsize": -0.1}, "rel_stepsize must be a finite number > 0"),
        ("pgd", {"rel_stepsize": math.nan}, "rel_stepsize"),
        ("pgd", {"random_start": "yes"}, "random_start must be True or False"),
        ("pgd", {"restarts": 0}, "restarts must be an integer >= 1"),
        ("pgd", {"restarts": 3, "random_start": False}, "restarts=3 needs random_start=True"),
        ("pgd", {"step_schedule": "linear"}, "step_schedule must be one of 'constant', 'cosine'"),
        ("fgsm", {"loss": "hinge"}, "loss must be one of"),
    ],
)
def test_get_attack_bad_params_name_the_param(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_attack(name, **params)


def test_losses_per_sample() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 1.0]])
    y = torch.tensor([0, 2])
    assert cross_entropy(logits, y).shape == (2,)
    assert margin(logits, y).tolist() == [-2.0, 2.0]


# -- effect on the trained zoo model -------------------------------
@pytest.fixture(scope="module")
def first100(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(100, data_dir=data_dir)
    return x, y


def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((predict(net, x) == y).float().mean())


def test_trained_pgd10_linf_breaks_standard_model(
    trained_fp: nn.Module, first100: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = first100
    clean = _accuracy(trained_fp, x, y)
    assert clean > 0.5
    x_adv = PGD()(trained_fp, x, y, Linf(8 / 255), gen())
    assert _accuracy(trained_fp, x_adv, y) < 0.05


def test_trained_fgsm_halves_accuracy(trained_fp: nn.Module, first100: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = first100
    clean = _accuracy(trained_fp, x, y)
    x_adv = FGSM()(trained_fp, x, y, Linf(8 / 255), gen())
    assert _accuracy(trained_fp, x_adv, y) <= clean / 2


def test_trained_pgd_l2_lowers_accuracy(trained_fp: nn.Module, first100: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = first100
    clean = _accuracy(trained_fp, x, y)
    x_adv = PGD()(trained_fp, x, y, L2(0.5), gen())
    assert _accuracy(trained_fp, x_adv, y) <= clean - 0.30
