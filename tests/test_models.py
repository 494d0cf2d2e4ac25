"""ResNet-20 and its BNN twin: shapes, which layers are binary, gradients flow to the input."""

import pytest
import torch

from arbibench.models.resnet import resnet20
from arbibench.nn import BinaryConv2d, count_binary_layers


@pytest.mark.parametrize("method", ["fp", "bnn"])
def test_forward_backward(method):
    torch.manual_seed(0)
    model = resnet20(method)
    x = torch.rand(4, 3, 32, 32, requires_grad=True)
    out = model(x)
    assert out.shape == (4, 10)
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert sum(p.numel() for p in model.parameters()) == 269_722


def test_bnn_binarizes_the_18_inner_convs_only():
    model = resnet20("bnn")
    assert count_binary_layers(model) == 18
    assert count_binary_layers(resnet20("fp")) == 0
    assert not isinstance(model.conv1, BinaryConv2d)  # stem stays full precision
    assert type(model.fc) is torch.nn.Linear  # classifier stays full precision


def test_normalisation_lives_inside_the_model():
    model = resnet20("fp").eval()
    x = torch.full((1, 3, 32, 32), 0.5)
    inner = (x - model.normalize.mean) / model.normalize.std
    assert torch.allclose(model.normalize(x), inner)


def test_unknown_method():
    with pytest.raises(ValueError, match="known methods"):
        resnet20("ternary")


def test_backbones_by_name_and_their_sizes():
    from arbibench.models.architectures import ARCHITECTURES, build_model

    # parameters of the full-precision twins (option A shortcuts: no 1x1 convolutions on the shortcuts)
    expected = {"resnet20": 269_722, "resnet18": 11_000_138, "vgg_small": 4_660_106, "resnet18_imagenet": 11_689_512}
    assert set(ARCHITECTURES) == set(expected)
    for arch, n in expected.items():
        model = build_model(arch, "fp")
        assert sum(p.numel() for p in model.parameters()) == n, arch
        assert model.fc.out_features == (1000 if ARCHITECTURES[arch].dataset == "imagenet" else 10)
    assert torch.allclose(build_model("resnet18_imagenet", "fp").normalize.mean.flatten(), torch.tensor(
        [0.485, 0.456, 0.406]))
    with pytest.raises(ValueError, match="known: resnet18, resnet18_imagenet, resnet20, vgg_small"):
        build_model("resnet50", "fp")
