"""MI-FGSM and CW-Linf: closed forms, equivalences with PGD, early exit, configs, and (with the trained zoo checkpoint)
their effect on an undefended network. The contract every attack keeps (verified results, determinism, model
untouched, early exit) is in tests/test_attack_contract.py.

Structural tests use randomly initialised ResNet-20s (full precision and binarized) on real CIFAR-10 test images,
labelled with the model's own predictions so that every sample starts correctly classified.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, L2, MIFGSM, PGD, CWLinf, Linf, get_attack
from arbibench.attacks.base import predict
from arbibench.attacks.mifgsm import l1_normalised
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.resnet import resnet20

THREATS = {"Linf": Linf(8 / 255), "L2": L2(0.5)}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- MI-FGSM ---------------------------------------------------------------------------------------------------------
def test_l1_normalised() -> None:
    g = torch.tensor([[[[1.0, -3.0], [0.0, 4.0]]], [[[0.0, 0.0], [0.0, 0.0]]]])
    got = l1_normalised(g)
    torch.testing.assert_close(got[0], g[0] / 8.0)
    assert torch.equal(got[1], torch.zeros_like(g[1]))  # a zero gradient stays zero, not NaN
    tiny = torch.full((1, 1, 2, 2), 1e-42)  # subnormal: the norm must not flush to zero
    torch.testing.assert_close(l1_normalised(tiny), torch.full_like(tiny, 0.25))
    huge = torch.full((1, 1, 2, 2), 3e38)  # the plain L1 norm would overflow to inf
    torch.testing.assert_close(l1_normalised(huge), torch.full_like(huge, 0.25))


def _hopeless_linear() -> nn.Module:
    """A 3-class linear model whose class 0 wins for any input in [0, 1] (bias 30 against weights of size ~1)."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    with torch.no_grad():
        net[1].bias.copy_(torch.tensor([30.0, 0.0, 0.0]))
    return net.eval()


def test_mifgsm_matches_the_update_rule() -> None:
    # g_{t+1} = mu g_t + grad / ||grad||_1; x_{t+1} = clip_{x, eps}(x_t + eps / T * sign(g_{t+1})), grad of CE
    # written out for logits W x + b: (softmax - onehot) W.
    net = _hopeless_linear()
    w, b = net[1].weight.double(), net[1].bias.double()
    x = torch.rand(4, 1, 2, 2, generator=gen(1)) * 0.6 + 0.2
    y = torch.zeros(4, dtype=torch.int64)
    eps, steps, decay = 0.1, 10, 1.0
    cur, g = x.double().flatten(1), torch.zeros(4, 4, dtype=torch.float64)
    lo, hi = (x.double().flatten(1) - eps).clamp(0, 1), (x.double().flatten(1) + eps).clamp(0, 1)
    for _ in range(steps):
        p = torch.softmax(cur @ w.T + b, dim=1)
        grad = (p - torch.nn.functional.one_hot(y, 3).double()) @ w
        g = decay * g + grad / grad.abs().sum(dim=1, keepdim=True)
        cur = torch.minimum(torch.maximum(cur + eps / steps * g.sign(), lo), hi)
    got = MIFGSM()(net, x, y, Linf(eps), gen())
    torch.testing.assert_close(got, cur.reshape(x.shape).float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("threat_name", list(THREATS))
def test_mifgsm_without_momentum_is_ifgsm(model: nn.Module, images: torch.Tensor, threat_name: str) -> None:
    # decay 0: each step follows grad / ||grad||_1, whose steepest-ascent direction is that of grad itself. In float64:
    # the two normalisations round differently in float32, and on an image at an L2 projection or clamp boundary the
    # last-bit difference moves the iterate by ~1e-4 (the identity is exact, the arithmetic is not)
    model = copy.deepcopy(model).double()
    x = images.double()
    y = predict(model, x)
    threat = THREATS[threat_name]
    mi = MIFGSM(steps=4, decay=0.0)(model, x, y, threat, gen())
    ifgsm = PGD(steps=4, rel_stepsize=0.25, random_start=False)(model, x, y, threat, gen())
    torch.testing.assert_close(mi, ifgsm, atol=1e-6, rtol=0)


def test_mifgsm_needs_no_randomness(images: torch.Tensor) -> None:
    torch.manual_seed(0)
    net = resnet20("bnn").eval()
    x = images
    y = predict(net, x)
    assert torch.equal(
        MIFGSM(steps=3)(net, x, y, Linf(1 / 255), gen(1)), MIFGSM(steps=3)(net, x, y, Linf(1 / 255), gen(2))
    )


def test_mifgsm_early_exit(grad_batches: type[nn.Module], images: torch.Tensor) -> None:
    torch.manual_seed(0)
    net = grad_batches(resnet20("bnn")).eval()
    x = images
    y = predict(net, x)
    half = len(y) // 2
    y[:half] = (y[:half] + 1) % 10
    x_adv = MIFGSM()(net, x, y, Linf(2 / 255), gen())
    assert torch.equal(x_adv[:half], x[:half])  # fooled at the clean point: kept, and dropped at once
    assert net.sizes[0] == len(y)  # the first gradient pass is also the clean check
    assert net.sizes[1] == len(y) - half
    assert net.sizes == sorted(net.sizes, reverse=True) and len(net.sizes) < 10


# -- CW-Linf ---------------------------------------------------------------------------------------------------------
def test_cw_linf_is_pgd_on_the_margin(model: nn.Module, images: torch.Tensor) -> None:
    x = images
    y = predict(model, x)
    threat = Linf(2 / 255)
    cw = CWLinf()(model, x, y, threat, gen(5))
    pgd = PGD(steps=30, rel_stepsize=0.1, loss="margin")(model, x, y, threat, gen(5))
    assert torch.equal(cw, pgd)


# -- registry and configs --------------------------------------------------------------------------------------------
def test_registry_and_defaults() -> None:
    assert ATTACKS["mifgsm"] is MIFGSM and ATTACKS["cw_linf"] is CWLinf
    mi = get_attack("MIFGSM").config_dict()
    assert mi == {"name": "mifgsm", "steps": 10, "decay": 1.0, "loss": "ce", "loss_temperature": 1.0}
    cw = get_attack("cw_linf").config_dict()
    assert cw == {
        "name": "cw_linf",
        "steps": 30,
        "rel_stepsize": 0.1,
        "random_start": True,
        "restarts": 1,
        "step_schedule": "constant",
        "loss": "margin",
    }
    assert json.loads(json.dumps(cw)) == cw and json.loads(json.dumps(mi)) == mi


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("mifgsm", {"steps": 0}, "steps must be an integer >= 1"),
        ("mifgsm", {"decay": -0.5}, "decay must be a finite number >= 0"),
        ("mifgsm", {"decay": float("nan")}, "decay must be"),
        ("mifgsm", {"loss": "hinge"}, "loss must be one of"),
        ("mifgsm", {"loss_temperature": -1.0}, "loss_temperature must be a finite number > 0"),
        ("cw_linf", {"loss": "ce"}, "loss must be one of 'margin'"),
        ("cw_linf", {"rel_stepsize": 0.0}, "rel_stepsize must be a finite number > 0"),
        ("cw_linf", {"restarts": 2, "random_start": False}, "needs random_start=True"),
    ],
)
def test_bad_params_name_the_param(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_attack(name, **params)


# -- effect on the trained zoo model -------------------------------
@pytest.fixture(scope="module")
def first200(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(200, data_dir=data_dir)
    return x, y


@pytest.mark.parametrize("name", ["mifgsm", "cw_linf"])
def test_trained_linf_breaks_standard_model(
    trained_fp: nn.Module, first200: tuple[torch.Tensor, torch.Tensor], name: str
) -> None:
    x, y = first200
    assert float((predict(trained_fp, x) == y).float().mean()) > 0.5
    x_adv = get_attack(name)(trained_fp, x, y, Linf(8 / 255), gen())
    assert float((predict(trained_fp, x_adv) == y).float().mean()) < 0.05
