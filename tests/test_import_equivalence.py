"""Imported checkpoints compute the papers' own eval-mode forward pass, for every source, without downloads.

For each source a state dict with the official key names and shapes (random values) is written in the official
container (``torch.save`` of ``{"state_dict": {"module." + key: ...}, ...}``), imported, and its logits compared with
an independent functional statement of the official eval-mode forward written below from the papers' code, in float64
on real images: within 1e-6 relative. float32 is reported, not asserted: a sign input within a rounding error of 0 can
flip and cascade, so the test prints how many images agree in argmax there, and how many sign inputs were exactly 0
(every official code base uses ``torch.sign``, 0 at 0, and so do the imports: ``arbibench.nn.zero_sign``).

Run with ``-s`` to see the measured numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.data import load_cifar10, load_imagenet
from arbibench.data.datasets import count_test_images
from arbibench.evaluation.model_import import DEFAULT_CHECK_IMAGES, import_checkpoint
from arbibench.models.importers import build_converted_model, get_source
from arbibench.models.zoo import load_model
from arbibench.nn.zero_sign import ZeroSign

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # every source normalises with these (CIFAR-10 included)
IMAGENET_STD = (0.229, 0.224, 0.225)
N_CIFAR, N_IMAGENET = 32, 4
State = dict[str, torch.Tensor]

# -- official state dicts (random values, official names and shapes) ------------------------------------------------


def _bn(state: State, prefix: str, c: int, g: torch.Generator, tracked: bool = True) -> None:
    state[prefix + "weight"] = torch.rand(c, generator=g) + 0.5
    state[prefix + "bias"] = torch.randn(c, generator=g) * 0.2
    state[prefix + "running_mean"] = torch.randn(c, generator=g) * 0.2
    state[prefix + "running_var"] = torch.rand(c, generator=g) + 0.5
    if tracked:
        state[prefix + "num_batches_tracked"] = torch.tensor(1000)


def _get_ab(n: int) -> tuple[int, int]:
    """RBNN's factorisation of C_in * k * k into the two rotation sizes (largest a <= sqrt(n) dividing n)."""
    a = next(i for i in range(int(math.isqrt(n)), 0, -1) if n % i == 0)
    return a, n // a


def cifar_resnet20_state(conv_extras: Callable[[State, str, int, int, torch.Generator], None],
                         block_extras: Callable[[State, str, int, torch.Generator], None] | None = None) -> State:
    """The official CIFAR ResNet-20 keys (Idelbayev layout: layer1..3, bn2 BatchNorm1d, linear)."""
    g = torch.Generator().manual_seed(0)
    state: State = {"conv1.weight": torch.randn(16, 3, 3, 3, generator=g) * 0.3}
    _bn(state, "bn1.", 16, g)
    in_planes = 16
    for s, planes in enumerate((16, 32, 64)):
        for b in range(3):
            p = f"layer{s + 1}.{b}."
            for j, cin in ((1, in_planes), (2, planes)):
                state[f"{p}conv{j}.weight"] = torch.randn(planes, cin, 3, 3, generator=g) * 0.1
                conv_extras(state, f"{p}conv{j}.", planes, cin, g)
                _bn(state, f"{p}bn{j}.", planes, g)
            if block_extras is not None:
                block_extras(state, p, planes, g)
            in_planes = planes
    _bn(state, "bn2.", 64, g)
    state["linear.weight"] = torch.randn(10, 64, generator=g) * 0.3
    state["linear.bias"] = torch.randn(10, generator=g) * 0.1
    return state


def recu_extras(state: State, p: str, c: int, cin: int, g: torch.Generator) -> None:
    state[p + "alpha"] = torch.rand(c, 1, 1, generator=g) + 0.1
    state[p + "tau"] = torch.tensor([0.99])


def biper_extras(state: State, p: str, c: int, cin: int, g: torch.Generator) -> None:
    state[p + "alpha"] = torch.rand(c, 1, 1, generator=g) + 0.1
    state[p + "beta"] = torch.rand(c, 1, 1, generator=g)
    state[p + "tau"] = torch.tensor(0.001)


def rbnn_extras(state: State, p: str, c: int, cin: int, g: torch.Generator) -> None:
    a, b = _get_ab(cin * 9)
    state[p + "R1"] = torch.linalg.qr(torch.randn(a, a, generator=g))[0]  # orthogonal, as RBNN's
    state[p + "R2"] = torch.linalg.qr(torch.randn(b, b, generator=g))[0]
    state[p + "alpha"] = torch.rand(c, 1, 1, generator=g) + 0.1
    state[p + "rotate"] = torch.rand(c, 1, 1, 1, generator=g) * math.pi


def siman_extras(state: State, p: str, c: int, cin: int, g: torch.Generator) -> None:
    state[p + "alpha"] = torch.rand(c, 1, 1, generator=g) + 0.1
    state[p + "B"] = (torch.rand(c, 1, cin * 9, generator=g) > 0.5).float()
    state[p + "percent"] = torch.tensor(0.0)


def siman_prelus(state: State, p: str, c: int, g: torch.Generator) -> None:
    for j in (1, 2):
        state[f"{p}nonlinear{j}.weight"] = torch.rand(c, generator=g) * 0.5


def no_extras(state: State, p: str, c: int, cin: int, g: torch.Generator) -> None:
    """IR-Net's IRConv2d holds only its weight."""


def reactnet_state() -> State:
    """The official ReAct-ResNet-18 keys (``birealnet18``: 4 stages of 4 single-convolution blocks)."""
    g = torch.Generator().manual_seed(0)
    state: State = {"conv1.weight": torch.randn(64, 3, 7, 7, generator=g) * 0.1}
    _bn(state, "bn1.", 64, g)
    inplanes = 64
    for s, planes in enumerate((64, 128, 256, 512)):
        for b in range(4):
            p = f"layer{s + 1}.{b}."
            state[p + "move0.bias"] = torch.randn(1, inplanes, 1, 1, generator=g) * 0.1
            state[p + "binary_conv.weight"] = torch.randn(planes, inplanes, 3, 3, generator=g) * 0.01
            _bn(state, p + "bn1.", planes, g)
            state[p + "move1.bias"] = torch.randn(1, planes, 1, 1, generator=g) * 0.1
            state[p + "prelu.weight"] = torch.rand(planes, generator=g) * 0.5
            state[p + "move2.bias"] = torch.randn(1, planes, 1, 1, generator=g) * 0.1
            if b == 0 and s > 0:
                state[p + "downsample.1.weight"] = torch.randn(planes, inplanes, 1, 1, generator=g) * 0.1
                _bn(state, p + "downsample.2.", planes, g)
            inplanes = planes
    state["fc.weight"] = torch.randn(1000, 512, generator=g) * 0.05
    state["fc.bias"] = torch.randn(1000, generator=g) * 0.01
    return state


# -- the official eval-mode forward passes, as functions of the official state dict ---------------------------------


def _batch_norm(state: State, prefix: str, x: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, state[prefix + "running_mean"], state[prefix + "running_var"], state[prefix + "weight"],
                        state[prefix + "bias"], training=False, eps=1e-5)


def _normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std


def recu_conv(state: State, p: str, a: torch.Tensor, stride: int) -> torch.Tensor:
    w = state[p + "weight"]
    w0 = w - w.mean([1, 2, 3], keepdim=True)
    w1 = w0 / (torch.sqrt(w0.var([1, 2, 3], keepdim=True) + 1e-5) / 2 / math.sqrt(2))
    q = (-torch.mean(torch.abs(w1)) * torch.log(2 - 2 * state[p + "tau"])).item()
    bw = torch.sign(torch.clamp(w1, -q, q))
    return F.conv2d(torch.sign(a), bw, None, stride, 1) * state[p + "alpha"]


def biper_conv(freq: float) -> Callable[[State, str, torch.Tensor, int], torch.Tensor]:
    def conv(state: State, p: str, a: torch.Tensor, stride: int) -> torch.Tensor:
        bw = torch.sign(torch.sin(freq * state[p + "weight"]))
        return F.conv2d(torch.sign(a), bw, None, stride, 1) * state[p + "alpha"]

    return conv


def rbnn_conv(state: State, p: str, a: torch.Tensor, stride: int) -> torch.Tensor:
    w = state[p + "weight"]
    w1 = w - w.mean([1, 2, 3], keepdim=True)
    w2 = w1 / w1.std([1, 2, 3], keepdim=True)
    a1 = a - a.mean([1, 2, 3], keepdim=True)
    a2 = a1 / a1.std([1, 2, 3], keepdim=True)
    r1, r2 = state[p + "R1"], state[p + "R2"]
    x = w2.view(w.shape[0], r1.shape[0], r2.shape[0])
    rweight = (r1.t() @ x @ r2).view_as(w)
    w3 = w2 + torch.abs(torch.sin(state[p + "rotate"])) * (rweight - w2)
    return F.conv2d(torch.sign(a2), torch.sign(w3), None, stride, 1) * state[p + "alpha"]


def siman_conv(state: State, p: str, a: torch.Tensor, stride: int) -> torch.Tensor:
    w = state[p + "weight"]
    a0 = a - a.mean([1, 2, 3], keepdim=True)
    a1 = a0 / torch.sqrt(a0.var([1, 2, 3], keepdim=True) + 1e-5)
    bw = (state[p + "B"] * 2 - 1).view_as(w)
    return F.conv2d(torch.sign(a1), bw, None, stride, 1) * state[p + "alpha"]


def irnet_conv(state: State, p: str, a: torch.Tensor, stride: int) -> torch.Tensor:
    w = state[p + "weight"]
    c = w.size(0)
    bw = w - w.view(c, -1).mean(-1).view(c, 1, 1, 1)
    bw = bw / bw.view(c, -1).std(-1).view(c, 1, 1, 1)
    sw = torch.pow(torch.full((c,), 2.0, dtype=w.dtype), (torch.log(bw.abs().view(c, -1).mean(-1)) / math.log(2))
                   .round()).view(c, 1, 1, 1)
    return F.conv2d(torch.sign(a), torch.sign(bw) * sw, None, stride, 1)


def shortcut_avgpool_pad(x: torch.Tensor, planes: int) -> torch.Tensor:
    return F.pad(F.avg_pool2d(x, 2), (0, 0, 0, 0, planes // 4, planes // 4))


def shortcut_option_a(x: torch.Tensor, planes: int) -> torch.Tensor:
    return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, planes // 4, planes // 4))


def cifar_resnet20_forward(state: State, x: torch.Tensor, conv: Callable, shortcut: Callable, per_conv: bool,
                           prelu: bool = False) -> torch.Tensor:
    """Idelbayev's CIFAR ResNet-20 as the RBNN / ReCU / SiMaN / BiPer / IR-Net code runs it in eval mode."""

    def act(y: torch.Tensor, p: str, j: int) -> torch.Tensor:
        return F.prelu(y, state[f"{p}nonlinear{j}.weight"]) if prelu else F.hardtanh(y)

    stem = _batch_norm(state, "bn1.", F.conv2d(_normalise(x), state["conv1.weight"], padding=1))
    out = F.relu(stem) if prelu else F.hardtanh(stem)
    in_planes = 16
    for s, planes in enumerate((16, 32, 64)):
        for b in range(3):
            p, stride = f"layer{s + 1}.{b}.", 2 if s > 0 and b == 0 else 1
            sc = shortcut(out, planes) if stride != 1 or in_planes != planes else out
            y = _batch_norm(state, p + "bn1.", conv(state, p + "conv1.", out, stride))
            if per_conv:
                y = act(y + sc, p, 1)
                out = act(_batch_norm(state, p + "bn2.", conv(state, p + "conv2.", y, 1)) + y, p, 2)
            else:
                y = act(y, p, 1)
                out = act(_batch_norm(state, p + "bn2.", conv(state, p + "conv2.", y, 1)) + sc, p, 2)
            in_planes = planes
    out = F.avg_pool2d(out, out.size(3)).flatten(1)
    return F.linear(_batch_norm(state, "bn2.", out), state["linear.weight"], state["linear.bias"])


def reactnet_forward(state: State, x: torch.Tensor) -> torch.Tensor:
    """ReActNet's birealnet18 (step 2) in eval mode, including its straight-through arithmetic."""

    def binary_activation(y: torch.Tensor) -> torch.Tensor:
        m1, m2, m3 = (y < -1).to(y.dtype), (y < 0).to(y.dtype), (y < 1).to(y.dtype)
        out1 = -1 * m1 + (y * y + 2 * y) * (1 - m1)
        out2 = out1 * m2 + (-y * y + 2 * y) * (1 - m2)
        out3 = out2 * m3 + 1 * (1 - m3)
        return torch.sign(y) - out3 + out3

    def binary_conv(w: torch.Tensor, y: torch.Tensor, stride: int) -> torch.Tensor:
        scale = w.abs().mean(dim=3, keepdim=True).mean(dim=2, keepdim=True).mean(dim=1, keepdim=True)
        clipped = torch.clamp(w, -1.0, 1.0)
        return F.conv2d(y, scale * torch.sign(w) - clipped + clipped, stride=stride, padding=1)

    out = F.max_pool2d(_batch_norm(state, "bn1.", F.conv2d(_normalise(x), state["conv1.weight"], stride=2,
                                                            padding=3)), 3, 2, 1)
    for s in range(4):
        for b in range(4):
            p, stride = f"layer{s + 1}.{b}.", 2 if s > 0 and b == 0 else 1
            y = binary_activation(out + state[p + "move0.bias"])
            y = _batch_norm(state, p + "bn1.", binary_conv(state[p + "binary_conv.weight"], y, stride))
            if p + "downsample.1.weight" in state:
                residual = F.conv2d(F.avg_pool2d(out, 2, 2), state[p + "downsample.1.weight"])
                residual = _batch_norm(state, p + "downsample.2.", residual)
            else:
                residual = out
            y = F.prelu(y + residual + state[p + "move1.bias"], state[p + "prelu.weight"])
            out = y + state[p + "move2.bias"]
    out = F.adaptive_avg_pool2d(out, 1).flatten(1)
    return F.linear(out, state["fc.weight"], state["fc.bias"])


# -- the cases ------------------------------------------------------------------------------------------------------

CASES = {
    # source: (arch, official state, official forward, container, import options)
    "recu": ("resnet20", lambda: cifar_resnet20_state(recu_extras),
             lambda st, x: cifar_resnet20_forward(st, x, recu_conv, shortcut_avgpool_pad, per_conv=True),
             "model_best.pth.tar", {}),
    "rbnn": ("resnet20", lambda: cifar_resnet20_state(rbnn_extras),
             lambda st, x: cifar_resnet20_forward(st, x, rbnn_conv, shortcut_option_a, per_conv=False),
             "model_best.pth.tar", {}),
    "rbnn_bireal": ("resnet20_bireal", lambda: cifar_resnet20_state(rbnn_extras),
                    lambda st, x: cifar_resnet20_forward(st, x, rbnn_conv, shortcut_option_a, per_conv=True),
                    "model_best.pth.tar", {}),
    "siman": ("resnet20", lambda: cifar_resnet20_state(siman_extras, siman_prelus),
              lambda st, x: cifar_resnet20_forward(st, x, siman_conv, shortcut_option_a, per_conv=True, prelu=True),
              "model_best.pth.tar", {}),
    "biper": ("resnet20", lambda: cifar_resnet20_state(biper_extras),
              lambda st, x: cifar_resnet20_forward(st, x, biper_conv(20.0), shortcut_avgpool_pad, per_conv=True),
              "model_best.pth.tar", {"freq": 20.0}),
    "irnet": ("resnet20", lambda: cifar_resnet20_state(no_extras),
              lambda st, x: cifar_resnet20_forward(st, x, irnet_conv, shortcut_option_a, per_conv=True),
              "model.th", {}),
    "reactnet": ("resnet18_imagenet", reactnet_state, reactnet_forward, "checkpoint.pth.tar", {}),
}


def save_official(state: State, path: Path) -> None:
    """The papers' container: ``nn.DataParallel`` keys under ``state_dict``, with the training bookkeeping."""
    torch.save({"epoch": 600, "state_dict": {"module." + k: v for k, v in state.items()},
                "best_prec1": torch.tensor(87.5), "optimizer": {"state": {}, "param_groups": [{"lr": 0.0}]}}, path)


def count_zero_sign_inputs(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Logits, and how many of the model's sign inputs were exactly 0 out of how many (activations and weights)."""
    counts = [0, 0]

    def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        counts[0] += int((args[0] == 0).sum())
        counts[1] += args[0].numel()

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, ZeroSign)]
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, counts[0], counts[1]


@pytest.mark.parametrize("case", list(CASES))
def test_import_matches_the_official_forward(case, tmp_path, data_dir):
    arch, make_state, official_forward, container, options = CASES[case]
    source = "rbnn" if case == "rbnn_bireal" else case
    state = make_state()
    ckpt = tmp_path / container
    save_official(state, ckpt)
    imagenet = source == "reactnet"
    if imagenet:
        x, _, _ = load_imagenet(N_IMAGENET, data_dir / "imagenet-sample")
        check_dir, n = data_dir / "imagenet-sample", N_IMAGENET
    else:
        x, _, _ = load_cifar10(N_CIFAR, data_dir=data_dir)
        check_dir, n = data_dir, N_CIFAR
    card = import_checkpoint(source, ckpt, arch, f"my_{case}", tmp_path / "models", trust_pickle=True,
                             options=options, n_examples=n, data_dir=check_dir)
    dataset = "imagenet" if imagenet else "cifar10"
    model = load_model(f"my_{case}", tmp_path / "models", dataset)
    assert card.is_file()

    state64 = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
    with torch.no_grad():
        expected64 = official_forward(state64, x.double())
        expected32 = official_forward(state, x)
    got64, zeros64, total64 = count_zero_sign_inputs(model.double(), x.double())
    rel64 = ((got64 - expected64).abs().max() / expected64.abs().max()).item()
    got32, zeros32, total32 = count_zero_sign_inputs(model.float(), x)
    agree32 = int((got32.argmax(1) == expected32.argmax(1)).sum())
    rel32 = ((got32 - expected32).abs().max() / expected32.abs().max()).item()
    print(f"\n{case}: float64 max relative error {rel64:.2e} on {len(x)} real images; float32 argmax agreement "
          f"{agree32}/{len(x)} (max relative error {rel32:.2e}); exact-zero sign inputs {zeros64}/{total64} "
          f"(float64), {zeros32}/{total32} (float32)")
    assert expected64.shape == got64.shape == (len(x), 1000 if imagenet else 10)
    assert expected64.std() > 0.01  # the random network separates the images: the comparison means something
    assert rel64 < 1e-6


def reactnet_state_before_2020_10(state: State) -> State:
    """The same weights in ReActNet's pre-October-2020 layout: each binary conv a flat ``weights`` of shape (N, 1)."""
    return {(k.removesuffix("weight") + "weights" if k.endswith("binary_conv.weight") else k):
            (v.reshape(-1, 1) if k.endswith("binary_conv.weight") else v) for k, v in state.items()}


def test_reactnet_old_flat_layout_imports_equal_to_the_new_layout(tmp_path, data_dir):
    new = reactnet_state()
    old = reactnet_state_before_2020_10(new)
    assert sum(k.endswith("binary_conv.weights") for k in old) == 16 and old["layer2.0.binary_conv.weights"].shape == (
        128 * 64 * 3 * 3, 1)
    source = get_source("reactnet")
    published = source.model("resnet18_imagenet")
    model_new, _ = build_converted_model(source, published, new, {})
    model_old, conversion = build_converted_model(source, published, old, {})
    state_new, state_old = model_new.state_dict(), model_old.state_dict()
    assert state_new.keys() == state_old.keys()
    assert all(torch.equal(state_new[k], state_old[k]) for k in state_new)
    assert "reshaped" in conversion.keys["layer4.3.binary_conv.weights"]

    # and through the file and the import command's own function, on real images
    ckpt = tmp_path / "checkpoint.pth.tar"
    save_official(old, ckpt)
    card = import_checkpoint("reactnet", ckpt, "resnet18_imagenet", "react_old", tmp_path / "models",
                             trust_pickle=True, n_examples=N_IMAGENET, data_dir=data_dir / "imagenet-sample")
    assert card.is_file()
    x, _, _ = load_imagenet(N_IMAGENET, data_dir / "imagenet-sample")
    with torch.no_grad():
        assert torch.equal(load_model("react_old", tmp_path / "models", "imagenet")(x), model_new.float()(x))


def test_reactnet_flat_weight_of_the_wrong_size_is_refused_by_name():
    old = reactnet_state_before_2020_10(reactnet_state())
    old["layer1.2.binary_conv.weights"] = old["layer1.2.binary_conv.weights"][:-5]
    source = get_source("reactnet")
    with pytest.raises(ValueError, match=r"layer1\.2\.binary_conv\.weights has shape \(36859, 1\)"):
        build_converted_model(source, source.model("resnet18_imagenet"), old, {})


def test_import_checks_on_all_of_a_folder_smaller_than_the_default(tmp_path, data_dir):
    """`arbibench import` on a 100-image ImageNet folder: the default check runs on its 100 images and says so,
    instead of refusing the default 1000."""
    sample = data_dir / "imagenet-sample"
    assert count_test_images("imagenet", sample) == 100 < DEFAULT_CHECK_IMAGES
    ckpt = tmp_path / "checkpoint.pth.tar"
    save_official(reactnet_state(), ckpt)
    result = CliRunner().invoke(app, ["import", str(ckpt), "--from", "reactnet", "--arch", "resnet18_imagenet",
                                      "--name", "react_small", "--model-dir", str(tmp_path / "models"),
                                      "--trust-pickle", "--data-dir", str(sample)])
    out = " ".join(result.output.split())
    assert result.exit_code == 0, out
    assert "on the first 100 test images" in out and "all 100 test images the data folder holds" in out
    assert json.loads((tmp_path / "models" / "react_small.json").read_text())["clean_acc_n_examples"] == 100
    with pytest.raises(ValueError, match="holds only 100 samples"):  # an explicit larger count is still refused
        import_checkpoint("reactnet", ckpt, "resnet18_imagenet", "react_more", tmp_path / "models",
                          trust_pickle=True, n_examples=101, data_dir=sample)
