"""Every method preset on every backbone: it builds, trains (gradients reach input and parameters), keeps the layers
the papers keep full precision, and its blocks compute what the paper's block computes.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import arbibench.models.methods as methods_module
from arbibench.models.architectures import ARCHITECTURES, build_model
from arbibench.models.methods import METHODS
from arbibench.models.resnet import BasicBlock, ResNet, ShortcutA, ShortcutAvgPad, resnet20
from arbibench.models.vgg import VGGSmall
from arbibench.nn import QUANTIZERS, BinaryConv2d, BinaryLinear, RPReLU, binary_sign, count_binary_layers

INPUT_SIZE = {"resnet20": 32, "resnet18": 32, "vgg_small": 32, "resnet18_imagenet": 64}  # 64: small, still fast
BINARY_LAYERS = {"resnet20": 18, "resnet18": 16, "vgg_small": 5, "resnet18_imagenet": 16}
DOWNSAMPLING_BLOCKS = {"resnet20": 2, "resnet18": 3, "resnet18_imagenet": 3}
ACTIVATION_TYPE = {
    "relu": nn.ReLU,
    "hardtanh": nn.Hardtanh,
    "prelu": nn.PReLU,
    "rprelu": RPReLU,
    "identity": nn.Identity,
}


def test_backbones_and_presets_are_the_ones_tested():
    assert set(ARCHITECTURES) == set(INPUT_SIZE)
    assert set(METHODS) == {"fp", "bnn", "xnor", "dorefa", "bireal", "irnet", "reactnet", "xnorpp",
                            # forward passes of published checkpoints (arbibench import)
                            "recu", "rbnn", "rbnn_bireal", "siman", "biper", "irnet_official", "reactnet_official"}


def first_conv(model: nn.Module) -> nn.Module:
    return model.features[0] if isinstance(model, VGGSmall) else model.conv1


@pytest.mark.parametrize("arch", sorted(INPUT_SIZE))
@pytest.mark.parametrize("method", list(METHODS))
def test_preset_builds_trains_and_keeps_the_right_layers_full_precision(method, arch):
    preset = METHODS[method]
    torch.manual_seed(0)
    model = build_model(arch, method).train()
    size = INPUT_SIZE[arch]
    x = torch.rand(2, 3, size, size, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 1000 if arch == "resnet18_imagenet" else 10)
    F.cross_entropy(out, torch.tensor([1, 2])).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in model.named_parameters():  # every parameter learns: weights, BN, thresholds, shifts, scales
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name

    # full precision: the first convolution and the classifier, always
    assert type(first_conv(model)) is nn.Conv2d
    assert type(model.fc) is nn.Linear
    assert count_binary_layers(model) == (BINARY_LAYERS[arch] if preset.is_binary else 0)
    binary = [m for m in model.modules() if isinstance(m, (BinaryConv2d, BinaryLinear))]
    assert len(binary) == BINARY_LAYERS[arch]  # fp uses the same layers with no quantizers
    for layer in binary:
        pairs = ((preset.input_quantizer, layer.input_quantizer), (preset.kernel_quantizer, layer.kernel_quantizer))
        for spec, q in pairs:
            assert (q is None) if spec is None else type(q) is QUANTIZERS[spec]
    acts = [m for m in model.modules() if isinstance(m, ACTIVATION_TYPE[preset.activation])]
    assert len(acts) >= BINARY_LAYERS[arch]  # one after every batch norm of a binary layer

    if isinstance(model, ResNet):
        blocks = [b for b in model.layers if isinstance(b, BasicBlock)]
        assert all(b.per_conv == (preset.shortcut == "per_conv") for b in blocks)
        shortcuts = [b.shortcut for b in blocks if not isinstance(b.shortcut, nn.Identity)]
        assert len(shortcuts) == DOWNSAMPLING_BLOCKS[arch]
        for sc in shortcuts:
            # Bi-Real / ReActNet, and every method on ImageNet: avgpool + real 1x1 conv + BN
            if preset.downsample == "real" or arch == "resnet18_imagenet":
                convs = [m for m in sc.modules() if isinstance(m, nn.Conv2d)]
                assert len(convs) == 1 and type(convs[0]) is nn.Conv2d and convs[0].kernel_size == (1, 1)
                assert any(isinstance(m, nn.BatchNorm2d) for m in sc.modules())
            elif preset.downsample == "avgpool_pad":  # ReCU / BiPer: 2x2 average pool, zero-padded channels
                assert isinstance(sc, ShortcutAvgPad) and not list(sc.parameters())
            else:  # He et al.'s option A: no parameters at all
                assert isinstance(sc, ShortcutA) and not list(sc.parameters())
    if isinstance(model, ResNet):  # the backbone options of the imported presets
        assert (model.classifier_bn is not None) == preset.classifier_bn
        stem_act = preset.stem_activation or preset.activation
        assert type(model.act1) is ACTIVATION_TYPE[stem_act]


def test_real_downsampling_is_exactly_bireal_and_reactnet():
    real = sorted(m for m, p in METHODS.items() if p.downsample == "real")
    assert real == ["bireal", "reactnet", "reactnet_official"]


# -- one block composed by hand ------------------------------------------------------------------------------------


def _randomise_batch_norms(module: nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.3)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.2)


def _bn(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    shape = (1, -1, 1, 1)
    scale = bn.weight.view(shape) / torch.sqrt(bn.running_var.view(shape) + bn.eps)
    return (x - bn.running_mean.view(shape)) * scale + bn.bias.view(shape)


def _binary_conv(conv: BinaryConv2d, x: torch.Tensor, kernel_scale: torch.Tensor) -> torch.Tensor:
    return F.conv2d(binary_sign(x), kernel_scale * binary_sign(conv.weight), stride=conv.stride, padding=1)


@pytest.mark.parametrize("method", ["bireal", "xnorpp"])
def test_per_conv_block_equals_the_hand_composed_bireal_block(method):
    """Bi-Real's block: a real shortcut around *each* binary convolution, on a down-sampling block (16 -> 32)."""
    torch.manual_seed(0)
    block = resnet20(method).layers[3]
    assert block.per_conv and block.conv1.stride == (2, 2)
    _randomise_batch_norms(block)
    with torch.no_grad():
        if method == "xnorpp":
            for conv in (block.conv1, block.conv2):
                conv.kernel_quantizer.alpha.copy_(torch.rand_like(conv.kernel_quantizer.alpha) + 0.5)
            block.act1.weight.fill_(0.2)
            block.act2.weight.fill_(0.3)
    block.eval()
    x = torch.randn(2, 16, 8, 8)

    def kernel_scale(conv):
        if method == "bireal":  # mean |W| per output channel
            return conv.weight.abs().mean(dim=(1, 2, 3), keepdim=True)
        return conv.kernel_quantizer.alpha  # XNOR-Net++: the learned factor

    def act(which, v):
        if method == "bireal":
            return v  # no activation besides the sign
        slope = (block.act1 if which == 1 else block.act2).weight.view(1, -1, 1, 1)
        return torch.where(v >= 0, v, slope * v)

    if method == "bireal":  # average pool, real 1x1 conv, batch norm
        shortcut = _bn(block.shortcut[2], F.conv2d(F.avg_pool2d(x, 2), block.shortcut[1].weight))
    else:  # option A: subsample, 8 zero channels on each side
        shortcut = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, 8, 8))
    with torch.no_grad():
        out1 = act(1, _bn(block.bn1, _binary_conv(block.conv1, x, kernel_scale(block.conv1))) + shortcut)
        expected = act(2, _bn(block.bn2, _binary_conv(block.conv2, out1, kernel_scale(block.conv2))) + out1)
        got = block(x)
    assert torch.allclose(got, expected, atol=1e-5)
    # and not the ResNet block, whose shortcut skips both convolutions
    with torch.no_grad():
        resnet_style = act(2, _bn(block.bn2, _binary_conv(block.conv2, out1, kernel_scale(block.conv2))) + shortcut)
    assert not torch.allclose(got, resnet_style, atol=1e-3)


# -- zero padding of binary convolutions ---------------------------------------------------------------------------


def test_binary_conv_pads_its_binarized_input_with_zero():
    """The simulation pads sign(x) with 0, as the Bi-Real / IR-Net / ReActNet PyTorch code does.

    A deployed XNOR/popcount kernel has no 0: it pads with +1 or -1, so its border outputs differ from these. On a
    constant +1 image, +1 padding would give every output the full-kernel sum (18 below) and -1 padding would give
    the in-image taps minus the out-of-image ones; zero padding gives the in-image taps only.
    """
    conv = BinaryConv2d(2, 1, 3, padding=1)
    with torch.no_grad():
        conv.weight.fill_(0.3)  # sign(W) = +1 everywhere: each output counts the taps that land inside the image
        out = conv(torch.ones(1, 2, 5, 5))[0, 0]
    assert out[2, 2] == 18  # interior: 2 channels x 9 taps
    assert out[0, 2] == out[2, 0] == out[4, 2] == out[2, 4] == 12  # edge: 2 x 6 taps inside, 3 padded ones count 0
    assert out[0, 0] == out[0, 4] == out[4, 0] == out[4, 4] == 8  # corner: 2 x 4 taps inside
    assert out[1:4, 1:4].eq(18).all()

    # random signs: every output is the sum of sign(W) over the taps that fall inside the image, nothing else
    torch.manual_seed(0)
    conv = BinaryConv2d(3, 4, 3, padding=1)
    s = binary_sign(conv.weight.detach())
    with torch.no_grad():
        out = conv(torch.ones(1, 3, 5, 5))[0]
    expected = torch.zeros(4, 5, 5)
    for i in range(5):
        for j in range(5):
            for kh in range(3):
                for kw in range(3):
                    if 0 <= i + kh - 1 < 5 and 0 <= j + kw - 1 < 5:
                        expected[:, i, j] += s[:, :, kh, kw].sum(dim=1)
    assert torch.equal(out, expected)
    deployed_plus_one = s.sum(dim=(1, 2, 3)).view(4, 1, 1).expand(4, 5, 5)  # what +1 padding would output
    assert torch.equal(out[:, 1:4, 1:4], deployed_plus_one[:, 1:4, 1:4])
    assert not torch.equal(out, deployed_plus_one)  # the border is where simulation and deployment part


# -- documentation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
def test_every_preset_has_its_paragraph_in_the_methods_docstring(method):
    doc = methods_module.__doc__
    match = re.search(rf"^``{method}``: (.+?)(?:\n\n|\Z)", doc, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no paragraph for preset {method!r} in arbibench/models/methods.py"
    first_author = METHODS[method].paper.split()[0]
    assert first_author in match.group(1), f"the {method!r} paragraph does not cite {METHODS[method].paper}"
