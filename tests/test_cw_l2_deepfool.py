"""CW-L2 and DeepFool, the two minimum-norm attacks: DeepFool's closed form on an affine classifier, the minimum-norm
property (boundary points, not budget edges), configs, and (with the trained zoo checkpoint) their effect on an
undefended network. The contract every attack keeps (verified results, determinism, model untouched, early exit) is
in tests/test_attack_contract.py.

Structural tests use randomly initialised ResNet-20s (full precision and binarized) on real CIFAR-10 test images,
labelled with the model's own predictions so that every sample starts correctly classified.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, CWL2, L2, DeepFool, Linf, get_attack
from arbibench.attacks.base import predict
from arbibench.data.cifar10 import load_cifar10


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- DeepFool on an affine classifier: one step lands (1 + overshoot) times past the closest boundary ----------------
def _affine(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    with torch.no_grad():
        net[1].weight.mul_(10.0)  # boundaries close to the inputs, so the box [0, 1] never clips the step
    return net.eval()


@pytest.mark.parametrize("threat", [L2(10.0), Linf(1.0)], ids=["L2", "Linf"])
def test_deepfool_closed_form_on_affine_model(threat: L2 | Linf) -> None:
    net = _affine(seed=1)
    x = torch.rand(6, 1, 2, 2, generator=gen(3)) * 0.2 + 0.4
    y = predict(net, x)
    w, b = net[1].weight.double(), net[1].bias.double()
    flat = x.double().flatten(1)
    expected = []
    for i in range(len(y)):
        others = [k for k in range(3) if k != int(y[i])]
        wk = torch.stack([w[k] - w[y[i]] for k in others])  # gradients of f_k = z_k - z_y
        fk = wk @ flat[i] + torch.stack([b[k] - b[y[i]] for k in others])
        dual = wk.abs().sum(dim=1) if isinstance(threat, Linf) else wk.norm(dim=1)
        best = int((fk.abs() / dual).argmin())
        if isinstance(threat, Linf):
            r = fk[best].abs() / dual[best] * wk[best].sign()
        else:
            r = fk[best].abs() / dual[best] ** 2 * wk[best]
        expected.append(flat[i] + 1.02 * r)
    want = torch.stack(expected).reshape(x.shape).float()
    assert bool(((want > 0) & (want < 1)).all())  # no clipping: the closed form holds exactly
    got = DeepFool()(net, x, y, threat, gen())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert bool((predict(net, got) != y).all())


# -- registry and configs --------------------------------------------------------------------------------------------
def test_registry_and_defaults() -> None:
    assert ATTACKS["cw_l2"] is CWL2 and ATTACKS["deepfool"] is DeepFool
    assert CWL2.needs_gradients and DeepFool.needs_gradients
    cw = get_attack("cw_l2").config_dict()
    assert cw == {
        "name": "cw_l2",
        "steps": 100,
        "binary_search_steps": 5,
        "initial_const": 0.01,
        "lr": 0.01,
        "confidence": 0.0,
        "early_abort": True,
        "exit_in_budget": True,
    }
    df = get_attack("DeepFool").config_dict()
    assert df == {"name": "deepfool", "steps": 50, "overshoot": 0.02, "candidates": 10, "revision": 1}
    assert json.loads(json.dumps(cw)) == cw and json.loads(json.dumps(df)) == df


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("cw_l2", {"steps": 0}, "steps must be an integer >= 1"),
        ("cw_l2", {"binary_search_steps": 0}, "binary_search_steps must be an integer >= 1"),
        ("cw_l2", {"initial_const": 0.0}, "initial_const must be a finite number > 0"),
        ("cw_l2", {"lr": float("inf")}, "lr must be a finite number > 0"),
        ("cw_l2", {"confidence": -1.0}, "confidence must be a finite number >= 0"),
        ("cw_l2", {"exit_in_budget": 1}, "exit_in_budget must be True or False"),
        ("deepfool", {"overshoot": -0.1}, "overshoot must be a finite number >= 0"),
        ("deepfool", {"candidates": 1}, "candidates must be an integer >= 2"),
        ("deepfool", {"steps": 1.5}, "steps must be an integer >= 1"),
    ],
)
def test_bad_params_name_the_param(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_attack(name, **params)


# -- effect on the trained zoo model -------------------------------
@pytest.fixture(scope="module")
def first100(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(100, data_dir=data_dir)
    return x, y


# Measured on the first 100 test images with the zoo v4 FP twin (clean 91%): deepfool Linf 8/255 -> 0%,
# deepfool L2 0.5 -> 1%, cw_l2 L2 0.5 -> 0%.
@pytest.mark.parametrize(
    "name,threat,bound",
    [("deepfool", Linf(8 / 255), 0.10), ("deepfool", L2(0.5), 0.15), ("cw_l2", L2(0.5), 0.10)],
    ids=["deepfool-Linf", "deepfool-L2", "cw_l2-L2"],
)
def test_trained_model_broken(
    trained_fp: nn.Module, first100: tuple[torch.Tensor, torch.Tensor], name: str, threat: L2 | Linf, bound: float
) -> None:
    x, y = first100
    assert float((predict(trained_fp, x) == y).float().mean()) > 0.8
    x_adv = get_attack(name)(trained_fp, x, y, threat, gen())
    assert float((predict(trained_fp, x_adv) == y).float().mean()) < bound


@pytest.fixture(scope="module")
def correct20(trained_fp: nn.Module, first100: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = first100
    keep = predict(trained_fp, x) == y
    return x[keep][:20], y[keep][:20]


def test_a_hit_on_an_exact_tie_is_pushed_past_it() -> None:
    """z_0 = u - 1/4 and z_1 = 1/4 - u tie at u = 1/4, where argmax reads class 0: the true class, so the hit is
    not confirmed; one push by the overshoot factor (u = 1/2 - 1.02/4) crosses. A hit never confirmed is dropped."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(1, 2))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([[1.0], [-1.0]]))
        net[1].bias.copy_(torch.tensor([-0.25, 0.25]))
    x, y = torch.full((2, 1, 1, 1), 0.5), torch.tensor([0, 0])
    found = torch.tensor([0.25, 0.5]).view(2, 1, 1, 1)  # a tie, and a point the model reads as correct
    fooled = DeepFool().confirmed(net, x, y, found, torch.tensor([True, True]))
    assert fooled.tolist() == [True, False]
    assert float(found[0]) == pytest.approx(0.5 - 1.02 * 0.25) and bool(predict(net, found[:1]) == 1)


@pytest.mark.parametrize("threat", [L2(100.0), Linf(1.0)], ids=["L2", "Linf"])
def test_deepfool_returns_boundary_points(
    trained_fp: nn.Module, correct20: tuple[torch.Tensor, torch.Tensor], threat: L2 | Linf
) -> None:
    x, y = correct20
    out = DeepFool().run_output(trained_fp, x, y, threat, gen())
    x_adv = out.x_adv
    assert bool((predict(trained_fp, x_adv) != y).all())  # confirmed in the forward the runner reads
    assert out.min_distance is not None
    # A boundary point: the true logit no longer leads, and no other leads it by much.
    with torch.no_grad():
        logits = trained_fp(x_adv)
    others = logits.masked_fill(torch.nn.functional.one_hot(y, 10).bool(), -torch.inf).amax(dim=1)
    margin = logits.gather(1, y[:, None]).squeeze(1) - others
    # v4 FP twin: margins in [-0.17, 0] (0: a tie argmax reads as the other class), the clean ones in [0.77, 16]
    assert float(margin.max()) <= 0 and float(margin.min()) > -0.5
    dist = threat.distance(x_adv, x)
    assert torch.allclose(dist.double(), out.min_distance.double(), rtol=1e-5)
    assert float(dist.max()) < 0.1 * threat.eps  # the boundary point, far inside the huge budget
    # Any budget holding every found point returns the same points: the search does not depend on eps.
    roomy = type(threat)(float(dist.max()) * 1.01)
    assert torch.equal(DeepFool()(trained_fp, x, y, roomy, gen()), x_adv)
    # Below the smallest of those norms, the (projected) results no longer fool the model.
    tight = type(threat)(float(dist.min()) * 0.9)
    x_tight = DeepFool()(trained_fp, x, y, tight, gen())
    tight.verify(x_tight, x)
    assert bool((predict(trained_fp, x_tight) == y).all())


def test_cw_l2_full_search_shrinks_the_first_hit(
    trained_fp: nn.Module, correct20: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = correct20[0][:4], correct20[1][:4]
    huge = L2(100.0)
    small = dict(steps=20, binary_search_steps=3)
    first_hit = CWL2(**small)(trained_fp, x, y, huge, gen())
    minimised = CWL2(**small, exit_in_budget=False)(trained_fp, x, y, huge, gen())
    for x_adv in (first_hit, minimised):
        assert bool((predict(trained_fp, x_adv) != y).all())
    d_first, d_min = huge.distance(first_hit, x), huge.distance(minimised, x)
    # The full search follows the same path up to the first hit and keeps the smallest example after it.
    assert bool((d_min <= d_first + 1e-6).all()) and float(d_min.sum()) < float(d_first.sum())
    assert float(d_first.max()) < 1.0
