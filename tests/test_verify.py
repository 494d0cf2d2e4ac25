"""The verifier: bounds that hold what every layer kind computes, verdicts that agree with enumeration on tiny BNNs,
and no attack fooling an image at a radius it verified (real CIFAR-10 images, shipped checkpoints)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import get_attack
from arbibench.attacks.base import predict
from arbibench.attacks.threat import Linf
from arbibench.data import load_cifar10
from arbibench.deploy import deploy
from arbibench.deploy.semantics import SIMULATION
from arbibench.models.architectures import build_model
from arbibench.models.methods import METHODS
from arbibench.models.zoo import load_model
from arbibench.nn.layers import BinaryLinear
from arbibench.verify import (
    FALSIFIED,
    UNKNOWN,
    VERIFIED,
    NetworkBounds,
    UnsupportedLayerError,
    branch_and_bound,
    certify,
    verdict,
)
from arbibench.verify import intervals as iv
from arbibench.verify.certify import corner


@pytest.fixture(scope="module")
def images(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(6, data_dir=data_dir)
    return x, y


def _built(arch: str, method: str, seed: int) -> nn.Module:
    """``build_model(arch, method)``, randomised, with its weights drawn from ``seed``: not from the global generator,
    whose state depends on which tests ran before on the worker (the tightness check below depends on the draw)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch, method)
    return _randomised(model, seed)


def _randomised(model: nn.Module, seed: int) -> nn.Module:
    """``model`` with BatchNorm statistics, RSign thresholds and RPReLU shifts drawn away from their initial values,
    so that every layer kind computes something other than its identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.5)  # type: ignore[union-attr]
                m.running_var.copy_(torch.rand(c, generator=g) * 2 + 0.5)  # type: ignore[union-attr]
                m.weight.copy_(torch.randn(c, generator=g))  # gamma of either sign
                m.bias.copy_(torch.randn(c, generator=g) * 0.3)
            for name, p in m.named_parameters(recurse=False):
                if name in ("threshold", "shift_in", "shift_out"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
                if name == "weight" and isinstance(m, nn.PReLU):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)  # slopes of either sign
    return model.eval()


def _check_holds(bounds: NetworkBounds, net: nn.Module, x: torch.Tensor, y: torch.Tensor, radius: float) -> int:
    """Every logit gap the model computes at the box's centre and corners lies above the bound; returns how many
    images had every sign decided, where, at radius 0, the bound must also be tight (within 1e-2 relative; a float
    network's intervals widen layer after layer, a binary one's stop at every decided sign)."""
    tight = 0
    g = torch.Generator().manual_seed(1)
    for i in range(x.shape[0]):
        xi, label = x[i : i + 1], int(y[i])
        p = bounds.run((xi.double() - radius).clamp(0, 1), (xi.double() + radius).clamp(0, 1))
        lower = bounds.margins(p.features, label)[0]
        signs = torch.randint(0, 2, (6, *xi.shape[1:]), generator=g).float() * 2 - 1
        points = torch.cat([xi, corner(xi.expand(6, *xi.shape[1:]), radius, signs)])
        with torch.no_grad():
            logits = net(points).double()
        gaps = logits[:, label : label + 1] - logits
        gaps[:, label] = math.inf
        assert bool((lower <= gaps).all()), (i, float((gaps - lower).min()))
        if int(p.undecided[0]) == 0 and p.site_sizes and radius == 0:
            tight += 1
            slack = (gaps[0] - lower) / (1 + gaps[0].abs())
            assert float(slack.nan_to_num(nan=0).max()) < 1e-2
    return tight


@pytest.mark.parametrize("method", sorted(METHODS))
def test_bounds_hold_what_each_preset_computes(method: str, images: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Every method preset (the zoo's and the importers'), on ResNet-20 with drawn statistics: the float model's
    logits at the centre and at random corners never leave the simulation's bounds."""
    net = _built("resnet20", method, seed=len(method))
    x, y = images
    bounds = NetworkBounds(net, "simulation")
    _check_holds(bounds, net, x[:3], y[:3], 0.0)
    _check_holds(bounds, net, x[:3], y[:3], 1e-5)


@pytest.mark.parametrize("arch, method", [("vgg_small", "bnn"), ("vgg_small", "reactnet"),
                                          ("resnet18_imagenet", "reactnet_official")])
def test_bounds_hold_on_the_other_backbones(arch: str, method: str, images: tuple[torch.Tensor, torch.Tensor]) -> None:
    """VGG-small's max pools and ImageNet ResNet-18's stem (7x7 stride 2, max pool, real down-sampling)."""
    net = _built(arch, method, seed=3)
    x, y = images
    _check_holds(NetworkBounds(net, "simulation"), net, x[:2], y[:2], 1e-5)


@pytest.mark.parametrize("name", ["resnet20_bnn", "resnet20_reactnet", "resnet20_xnor"])
def test_deployed_bounds_hold_the_deployed_network(name: str, images: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The bit-packed network (emulator: the kernels' oracle) stays inside the deployed bounds, and images whose
    signs are all decided (some of resnet20_bnn's) get a bound within 1e-2 (relative) of the deployed logits."""
    x, y = images
    net = load_model(name)
    tight = _check_holds(NetworkBounds(net, "deployed"), deploy(net, backend="emulator"), x, y, 0.0)
    assert tight >= 1 or name != "resnet20_bnn"


def _tiny_bnn(seed: int, d_in: int, first: nn.Module | None = None, input_quantizer: str = "rsign") -> nn.Module:
    """A BNN small enough to enumerate: ``first`` (a real layer) or a sign of the raw input against a threshold per
    pixel, two binary layers with BatchNorm and hardtanh, a binary classifier of 3 classes."""
    torch.manual_seed(seed)
    hidden = 8
    layers: list[nn.Module] = [] if first is None else [first, nn.BatchNorm1d(hidden), nn.Hardtanh()]
    width = d_in if first is None else hidden
    q0 = input_quantizer if first is None else "ste_sign"
    layers += [BinaryLinear(width, hidden, bias=False, input_quantizer=q0, kernel_quantizer="channel_scaled_sign"),
               nn.BatchNorm1d(hidden), nn.Hardtanh(),
               BinaryLinear(hidden, hidden, bias=False, input_quantizer="ste_sign", kernel_quantizer="ste_sign"),
               nn.BatchNorm1d(hidden), nn.Hardtanh(),
               BinaryLinear(hidden, 3, input_quantizer="ste_sign", kernel_quantizer="ste_sign")]
    net = _randomised(nn.Sequential(*layers), seed)
    with torch.no_grad():
        for m in net.modules():
            if hasattr(m, "threshold"):
                m.threshold.uniform_(0.25, 0.75)
    return net


def _box(x: torch.Tensor, radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    return (x.double() - radius).clamp(0, 1), (x.double() + radius).clamp(0, 1)


@pytest.mark.parametrize("input_quantizer", ["rsign", "zero_rsign"])
def test_verdicts_match_the_enumerated_sign_patterns(input_quantizer: str) -> None:
    """Each input pixel's sign depends on that pixel alone, so the 2^6 corners of the box realise every reachable
    sign pattern, and the network's output depends on the pattern only: robust iff every corner is classified
    right. The branch-and-bound (no probes) proves exactly the robust boxes; a falsified verdict holds a real
    counterexample of a box that is not robust."""
    d, g = 6, torch.Generator().manual_seed(0)
    proven = falsified = 0
    all_corners = torch.tensor(list(itertools.product((-1.0, 1.0), repeat=d)))
    for seed in range(8):
        net = _tiny_bnn(seed, d, input_quantizer=input_quantizer)
        bounds = NetworkBounds(net, "simulation")
        for _ in range(6):
            x = torch.rand(1, d, generator=g)
            radius = float(torch.rand(1, generator=g)) * 0.3
            label = int(predict(net, x)[0])
            robust = bool((predict(net, corner(x.expand(2**d, d), radius, all_corners)) == label).all())
            search = branch_and_bound(bounds, *_box(x, radius), label, max_nodes=4096)
            assert search.proven == robust, (seed, radius, search)
            proven += search.proven
            v, found = verdict(bounds, net, x, label, radius, max_nodes=4096, corners=8, generator=g)
            assert v.status == (VERIFIED if robust else FALSIFIED) or (v.status == UNKNOWN and not robust)
            if found is not None:
                falsified += 1
                assert int(predict(net, found)[0]) != label
    assert proven >= 5 and falsified >= 5, (proven, falsified)


def test_verdicts_never_contradict_a_dense_input_grid() -> None:
    """A real first layer on 2-pixel inputs: a 101 x 101 grid of the box is a near-exhaustive search. No box with a
    misclassified grid point is proven, and most boxes the grid finds robust are."""
    g = torch.Generator().manual_seed(1)
    proven = robust_boxes = 0
    axis = torch.linspace(-1, 1, 101)
    grid = torch.cartesian_prod(axis, axis)
    for seed in range(6):
        net = _tiny_bnn(seed, 2, first=nn.Linear(2, 8))
        bounds = NetworkBounds(net, "simulation")
        for _ in range(8):
            x = torch.rand(1, 2, generator=g) * 0.8 + 0.1
            radius = float(torch.rand(1, generator=g)) * 0.05
            label = int(predict(net, x)[0])
            robust = bool((predict(net, corner(x.expand(grid.shape[0], 2), radius, grid)) == label).all())
            search = branch_and_bound(bounds, *_box(x, radius), label, max_nodes=2048)
            assert robust or not search.proven, (seed, radius)
            robust_boxes += robust
            proven += search.proven
    assert proven >= 0.8 * robust_boxes and robust_boxes >= 10, (proven, robust_boxes)


def test_no_attack_fools_a_verified_image_at_its_radius(images: tuple[torch.Tensor, torch.Tensor]) -> None:
    """resnet20_bnn on real test images: at every radius the verifier verified, PGD and 200 random sign corners
    leave the image classified right; every counterexample it reports is misclassified and inside the ball."""
    x, y = images
    net = load_model("resnet20_bnn")
    result = certify(net, x[:4], y[:4], radius_min=1e-4 / 255, radius_max=1e-3 / 255, steps=0, max_nodes=32,
                     corners=20)
    pgd = get_attack("pgd", steps=20, restarts=2)
    g = torch.Generator().manual_seed(0)
    checked = 0
    for i, cert in enumerate(result.images):
        xi, yi = x[i : i + 1], y[i : i + 1]
        for v in cert.verdicts:
            if v.status == VERIFIED:
                adv = pgd(net, xi, yi, Linf(v.radius), g)
                signs = torch.randint(0, 2, (200, *xi.shape[1:]), generator=g).float() * 2 - 1
                corners = corner(xi.expand(200, *xi.shape[1:]), v.radius, signs)
                assert bool((predict(net, torch.cat([adv, corners])) == yi).all()), (i, v.radius)
                checked += 1
        if cert.counterexample is not None and cert.correct:
            Linf(cert.attacked).verify(cert.counterexample, xi, tol=0.0)
            assert int(predict(net, cert.counterexample)[0]) != int(yi)
    assert checked >= 2
    assert all(c.certified <= c.attacked for c in result.images)


def test_a_layer_it_cannot_bound_is_refused_by_name() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)).eval()
    with pytest.raises(UnsupportedLayerError, match="layer '1' is a Tanh"):
        NetworkBounds(net, SIMULATION).run(torch.zeros(1, 4), torch.ones(1, 4))


def test_a_network_without_binary_layers_has_no_deployed_semantics(data_dir, monkeypatch) -> None:
    # `verify -m resnet20_fp` under the default deployed semantics would label float bounds as the deployed
    # network's; eval refuses --inference deployed for it, and so does the verifier, naming the fix
    from typer.testing import CliRunner

    from arbibench.cli import app

    with pytest.raises(ValueError, match="no binary layer.*semantics 'simulation'"):
        NetworkBounds(load_model("resnet20_fp"))
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    result = CliRunner().invoke(app, ["verify", "-m", "resnet20_fp", "-n", "1"])
    assert result.exit_code == 2 and "no binary layer" in result.output, result.output
    assert "Traceback" not in result.output


def test_interval_prelu_and_batchnorm_hold_every_point() -> None:
    """Pure math: PReLU with slopes of both signs and a BatchNorm with a negative scale, on a dense grid."""
    lo, hi = torch.tensor([[-2.0, -1.0, 0.5, -0.3]]), torch.tensor([[1.0, -0.5, 2.0, 0.0]])
    points = lo + (hi - lo) * torch.linspace(0, 1, 201).view(-1, 1)
    for slope in (torch.tensor([0.25, -0.5, 2.0, -3.0]),):
        out_lo, out_hi = iv.prelu((lo.double(), hi.double()), slope.double())
        values = torch.where(points >= 0, points, slope * points).double()
        assert bool((values >= out_lo).all() and (values <= out_hi).all())
    a, mu, beta = torch.tensor([-2.0, 0.5, 1.0, -0.1]), torch.tensor([0.1, 0, -1, 3]), torch.tensor([1.0, 0, 2, -1])
    out_lo, out_hi = iv.affine((lo.double(), hi.double()), a.double(), mu.double(), beta.double())
    values = (a * (points - mu) + beta).double()
    assert bool((values >= out_lo).all() and (values <= out_hi).all())


def test_cli_writes_the_bracket_and_refuses_bad_radii(tmp_path: Path, data_dir: Path) -> None:
    from typer.testing import CliRunner

    from arbibench.cli import app

    out = tmp_path / "v.json"
    env = {"ARBIBENCH_DATA": str(data_dir)}
    args = ["verify", "-m", "resnet20_bnn", "-n", "1", "--steps", "0", "--nodes", "16", "--corners", "4"]
    result = CliRunner().invoke(app, [*args, "--json", str(out)], env=env)
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["model"] == "resnet20_bnn" and len(record["per_image"]) == 1 and "median eps*" in result.output
    bad = CliRunner().invoke(app, [*args, "--radius-min", "0", "--json", str(tmp_path / "no.json")], env=env)
    assert bad.exit_code == 2 and "error:" in bad.output and "radius" in bad.output
    assert not (tmp_path / "no.json").exists()
