"""Deployed models on real CIFAR-10 images: kernel == emulator for every zoo BNN and imported preset, deployed ==
simulation where the arithmetic is provably the same, the fallbacks' logits, and the converter's refusals."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.data import load_cifar10
from arbibench.deploy import DeployedModel, DeployError, deploy, deployed
from arbibench.deploy.kernel import kernel_available
from arbibench.models.architectures import build_model
from arbibench.models.importers import build_converted_model, get_source
from arbibench.models.methods import get_method
from arbibench.models.zoo import ZOO, load_model
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from tests.test_import_equivalence import CASES

AVAILABLE, ISA = kernel_available()
needs_kernel = pytest.mark.skipif(not AVAILABLE, reason=f"no C kernel on this machine: {ISA}")
# the claims that hold for every backend run on the kernel where it builds, else on the emulator (same logits)
BACKEND = "kernel" if AVAILABLE else "emulator"
ZOO_BNNS = [n for n, e in ZOO.items() if e.shipped and get_method(e.method).is_binary]
IMPORTED = ["recu", "rbnn", "rbnn_bireal", "siman", "biper", "irnet"]  # the CIFAR ResNet-20 importers
N_IMAGES = 300


@pytest.fixture(scope="module")
def images300(data_dir: Path) -> torch.Tensor:
    x, _, _ = load_cifar10(N_IMAGES, data_dir=data_dir)
    return x


def simulation(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(x)
    return out


@needs_kernel
@pytest.mark.parametrize("name", ZOO_BNNS)
def test_zoo_kernel_equals_emulator_on_real_images(name: str, images300: torch.Tensor) -> None:
    model = load_model(name)
    kernel, emulator = deploy(model, backend="kernel"), deploy(model, backend="emulator")
    got, want = kernel(images300), emulator(images300)
    assert torch.equal(got, want), f"{name}: max difference {(got - want).abs().max().item()}"
    assert kernel.backend.startswith("kernel") and emulator.backend == "emulator"
    # the deployed network is the same network: its predictions stay the simulation's on nearly every image
    agree = (got.argmax(1) == simulation(model, images300).argmax(1)).float().mean().item()
    assert agree >= 0.98, f"{name}: deployed and simulation agree on {agree:.1%} of {N_IMAGES} images"


@pytest.mark.parametrize("name", ["resnet20_bnn", "resnet20_irnet"])
def test_deployed_equals_simulation_where_scales_are_powers_of_two(name: str, images300: torch.Tensor) -> None:
    """bnn (scale 1) and irnet (Libra-PB's 2^k): every simulated conv output is acc * s exactly, so with torch's
    BatchNorm kept (fold_batchnorm=False) the deployed logits are the simulation's bit for bit."""
    model = load_model(name)
    got = deploy(model, backend=BACKEND, fold_batchnorm=False)(images300)
    assert torch.equal(got, simulation(model, images300))
    folded = deploy(model, backend=BACKEND)(images300)  # the engines' fold rounds the BatchNorm differently
    assert torch.equal(folded.argmax(1), got.argmax(1))
    assert (folded - got).abs().max().item() < 1e-4


def test_not_exact_where_scales_are_not_powers_of_two(images300: torch.Tensor) -> None:
    """xnor's mean|W| scales round differently after an integer sum: the claim above is specific, not general."""
    model = load_model("resnet20_xnor")
    got = deploy(model, backend="emulator", fold_batchnorm=False)(images300)
    assert not torch.equal(got, simulation(model, images300))


def imported_model(case: str) -> nn.Module:
    arch, make_state, _, _, options = CASES[case]
    source = get_source("rbnn" if case == "rbnn_bireal" else case)
    model, _ = build_converted_model(source, source.model(arch), make_state(), options)
    return model.float().eval()


@pytest.mark.parametrize("case", IMPORTED)
def test_imported_presets_deploy_and_kernel_equals_emulator(case: str, images300: torch.Tensor) -> None:
    model = imported_model(case)
    x = images300[:100]
    kernel = deploy(model, backend=BACKEND)
    got, want = kernel(x), deploy(model, backend="emulator")(x)
    assert torch.equal(got, want), f"{case}: max difference {(got - want).abs().max().item()}"
    specs = [m.spec for m in kernel.modules() if hasattr(m, "spec")]
    assert len(specs) == 18 and all(s.alphabet == "pm1_zero" for s in specs)  # torch.sign, 0 kept exact


@pytest.mark.parametrize("pad", [1, -1])
def test_padding_with_ones_is_another_network(pad: int, images300: torch.Tensor) -> None:
    model = load_model("resnet20_bnn")
    x = images300[:100]
    got = deploy(model, backend=BACKEND, pad=pad)(x)
    assert torch.equal(got, deploy(model, backend="emulator", pad=pad)(x))
    assert not torch.equal(got, deploy(model, backend="emulator")(x))


@needs_kernel
def test_forced_fallbacks_give_the_same_logits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               images300: torch.Tensor) -> None:
    model = load_model("resnet20_reactnet")
    x = images300[:64]
    want = deploy(model, backend="kernel", threads=2)(x)
    monkeypatch.setenv("ARBIBENCH_CACHE", str(tmp_path))  # no cached library ...
    monkeypatch.setenv("CC", "")  # ... and no compiler
    import arbibench.deploy.numba_kernel as numba_kernel

    def no_numba() -> None:
        raise numba_kernel.NumbaUnavailableError("numba is not installed (forced by the test)")

    monkeypatch.setattr(numba_kernel, "check_numba", no_numba)
    fallback = deploy(model)  # auto
    assert fallback.backend == "emulator" and "no C kernel" in fallback.backend_note
    assert torch.equal(fallback(x), want)


def test_a_refused_layer_gives_one_error_naming_it() -> None:
    model = build_model("resnet20", "reactnet_official").eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.layers[4].conv2.input_quantizer = None  # binary weights, real-valued inputs
    with pytest.raises(DeployError, match=r"layer layers\.4\.conv2: .*inputs are real-valued"):
        deploy(model, backend="emulator")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing changed

    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = BinaryConv2d(4, 4, 3, padding=1)
            self.conv.dilation = (2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

    with pytest.raises(DeployError, match=r"layer conv: groups=1, dilation=\(2, 2\)"):
        deploy(Wide().eval())
    with pytest.raises(DeployError, match="binary linear"):
        deploy(nn.Sequential(BinaryLinear(4, 2)).eval())
    with pytest.raises(DeployError, match="training mode"):
        deploy(build_model("resnet20", "bnn"))
    with pytest.raises(DeployError, match="no binary convolution"):
        deploy(build_model("resnet20", "fp").eval())
    with pytest.raises(DeployError, match="pad"):
        deploy(build_model("resnet20", "bnn").eval(), pad=2)


def test_deployed_model_is_inference_only_and_cached(images300: torch.Tensor,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    model = load_model("resnet20_xnor")
    with caplog.at_level(logging.WARNING):
        first = deployed(model, backend="emulator")
    assert deployed(model, backend="emulator") is first
    assert isinstance(first, DeployedModel)
    with pytest.raises(DeployError, match="inference-only"):
        first.train()
    out = first(images300[:4].requires_grad_(True))
    assert not out.requires_grad
    with torch.no_grad():
        model.fc.bias.add_(1.0)  # the simulation changed: its deployed form is rebuilt
    second = deployed(model, backend="emulator")
    assert second is not first
    assert torch.allclose(second(images300[:4]), out + 1.0)


def test_numba_backend_equals_the_kernel_where_installed(images300: torch.Tensor) -> None:
    """The optional numba fallback (pip install 'arbibench[deploy]') computes the same logits."""
    pytest.importorskip("numba", reason="numba is the optional 'deploy' extra")
    model = load_model("resnet20_reactnet")
    x = images300[:16]
    got = deploy(model, backend="numba")(x)
    assert torch.equal(got, deploy(model, backend="emulator")(x))


def test_the_glue_average_pool_gives_torch_values(monkeypatch: pytest.MonkeyPatch, images300: torch.Tensor) -> None:
    """The deployed graph's faster 2x2 average pool (real down-sampling) leaves every logit as torch's pool does."""
    import arbibench.deploy.convert as convert
    from arbibench.deploy.pooling import avg_pool_2x2

    g = torch.Generator().manual_seed(1)
    for shape in [(3, 5, 8, 6), (2, 4, 7, 9)]:  # even, and odd (falls back to torch's pool)
        x = torch.randn(shape, generator=g)
        assert torch.equal(avg_pool_2x2(x), torch.nn.functional.avg_pool2d(x, 2))
    model = load_model("resnet20_reactnet")
    x = images300[:64]
    faster = deploy(model, backend="emulator")
    assert sum(type(m).__name__ == "AvgPool2x2" for m in faster.modules()) == 2
    monkeypatch.setattr(convert, "matches_torch", lambda: False)
    plain = deploy(model, backend="emulator")
    assert sum(type(m).__name__ == "AvgPool2x2" for m in plain.modules()) == 0
    assert torch.equal(faster(x), plain(x))
