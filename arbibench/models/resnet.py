"""ResNets of basic blocks (CIFAR ResNet-20 and ResNet-18, ImageNet ResNet-18), parametrised by a method preset.

The same definition builds the full-precision model and its binarized twin: only the inner 3x3 convolutions take
the preset's quantizers; the stem convolution, the shortcuts and the classifier stay full precision. Inputs are
images in [0, 1]; normalisation happens inside the model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.models.methods import Method, get_method
from arbibench.nn.activations import build_activation
from arbibench.nn.layers import BinaryConv2d

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Normalize(nn.Module):
    """Per-channel standardisation, so that attacks work on [0, 1] pixels and never see means or stds."""

    mean: torch.Tensor  # buffers, declared so that type checkers see tensors, not Module | Tensor
    std: torch.Tensor

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class ShortcutA(nn.Module):
    """He et al.'s option A: subsample and zero-pad channels; no parameters, so nothing to binarize."""

    def __init__(self, out_channels: int, in_channels: int, stride: int) -> None:
        super().__init__()
        self.pad, self.stride = (out_channels - in_channels) // 2, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, self.pad, self.pad))


class ShortcutAvgPad(nn.Module):
    """ReCU's and BiPer's down-sampling shortcut: 2x2 average pool, then zero-padded channels; no parameters."""

    def __init__(self, out_channels: int, in_channels: int) -> None:
        super().__init__()
        self.pad = (out_channels - in_channels) // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(F.avg_pool2d(x, 2), (0, 0, 0, 0, self.pad, self.pad))


def real_downsample(in_planes: int, planes: int, stride: int) -> nn.Sequential:
    """Bi-Real's real-valued down-sampling shortcut: average pool, full-precision 1x1 conv, batch norm."""
    pool: nn.Module = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
    return nn.Sequential(pool, nn.Conv2d(in_planes, planes, 1, bias=False), nn.BatchNorm2d(planes))


def downsample_shortcut(in_planes: int, planes: int, stride: int, method: Method) -> nn.Module:
    if stride == 1 and in_planes == planes:
        return nn.Identity()
    if method.downsample == "real":
        return real_downsample(in_planes, planes, stride)
    if method.downsample == "avgpool_pad":
        if stride != 2:
            raise ValueError(f"downsample 'avgpool_pad' pools by 2; a stride-{stride} block cannot use it")
        return ShortcutAvgPad(planes, in_planes)
    if method.downsample != "option_a":
        raise ValueError(f"unknown downsample {method.downsample!r}; known: option_a, avgpool_pad, real")
    return ShortcutA(planes, in_planes, stride)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions; the shortcut goes around both (``shortcut="block"``) or around each (``"per_conv"``)."""

    def __init__(self, in_planes: int, planes: int, stride: int, method: Method) -> None:
        super().__init__()
        q: dict[str, Any] = {"input_quantizer": method.input_quantizer, "kernel_quantizer": method.kernel_quantizer}
        self.per_conv = method.shortcut == "per_conv"
        self.conv1 = BinaryConv2d(in_planes, planes, 3, stride=stride, padding=1, **q)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = build_activation(method.activation, planes)
        self.conv2 = BinaryConv2d(planes, planes, 3, stride=1, padding=1, **q)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = build_activation(method.activation, planes)
        self.shortcut = downsample_shortcut(in_planes, planes, stride, method)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor
        if self.per_conv:
            out = self.act1(self.bn1(self.conv1(x)) + self.shortcut(x))
            out = self.act2(self.bn2(self.conv2(out)) + out)
        else:
            out = self.act1(self.bn1(self.conv1(x)))
            out = self.act2(self.bn2(self.conv2(out)) + self.shortcut(x))
        return out


class ResNet(nn.Module):
    """A ResNet of basic blocks, parametrised by a method preset.

    ``stem="cifar"`` is one 3x3 convolution (CIFAR ResNets); ``stem="imagenet"`` is the 7x7 stride-2 convolution
    and 3x3 max pool of ImageNet ResNets. The stem and the classifier always stay full precision. The preset's
    ``stem_activation`` follows the stem's batch norm and ``classifier_bn`` adds a BatchNorm1d before the classifier
    (as the RBNN / ReCU / IR-Net CIFAR code has); the defaults leave both as in the other presets.
    """

    def __init__(
        self,
        num_blocks: tuple[int, ...],
        widths: tuple[int, ...],
        method: Method | str = "fp",
        num_classes: int = 10,
        mean: tuple[float, ...] = CIFAR10_MEAN,
        std: tuple[float, ...] = CIFAR10_STD,
        stem: str = "cifar",
    ) -> None:
        super().__init__()
        method = get_method(method) if isinstance(method, str) else method
        self.method = method.name
        self.normalize = Normalize(mean, std)
        if stem == "cifar":
            self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
            self.pool: nn.Module = nn.Identity()
        elif stem == "imagenet":
            self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
            self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            raise ValueError(f"unknown stem {stem!r}; use 'cifar' or 'imagenet'")
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act1 = build_activation(method.stem_activation or method.activation, widths[0])
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for stage, (planes, n) in enumerate(zip(widths, num_blocks, strict=True)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(BasicBlock(in_planes, planes, stride, method))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.classifier_bn = nn.BatchNorm1d(in_planes) if method.classifier_bn else None
        self.fc = nn.Linear(in_planes, num_classes)  # classifier stays full precision
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.act1(self.bn1(self.conv1(self.normalize(x)))))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        if self.classifier_bn is not None:
            out = self.classifier_bn(out)
        logits: torch.Tensor = self.fc(out)
        return logits



def resnet20(method: Method | str = "fp", num_classes: int = 10) -> ResNet:
    """CIFAR ResNet-20 (He et al. 2016): 3 stages of 3 basic blocks, 16/32/64 channels, ~0.27M parameters."""
    return ResNet((3, 3, 3), (16, 32, 64), method, num_classes)


def resnet18(method: Method | str = "fp", num_classes: int = 10) -> ResNet:
    """CIFAR ResNet-18: the ImageNet ResNet-18's 4 stages of 2 blocks (64-512 channels) on a 3x3 stem, ~11M params."""
    return ResNet((2, 2, 2, 2), (64, 128, 256, 512), method, num_classes)


def resnet18_imagenet(method: Method | str = "fp", num_classes: int = 1000) -> ResNet:
    """ImageNet ResNet-18 as Bi-Real Net and ReActNet binarize it (7x7 stem and max pool, 224x224 inputs).

    Every method gets a real-valued down-sampling shortcut here (average pool, 1x1 conv, batch norm): the ImageNet
    BNN papers all keep those convolutions in full precision, and parameter-free shortcuts lose too much at this
    scale. (The CIFAR backbones follow each preset's ``downsample``.)
    """
    method = replace(get_method(method) if isinstance(method, str) else method, downsample="real")
    return ResNet(
        (2, 2, 2, 2), (64, 128, 256, 512), method, num_classes, IMAGENET_MEAN, IMAGENET_STD, stem="imagenet"
    )
