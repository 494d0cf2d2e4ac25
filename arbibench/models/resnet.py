"""CIFAR ResNet-20 (He et al. 2016, 16/32/64 channels), parametrised by a method preset.

The same definition builds the full-precision model and its binarized twin: only the inner 3x3 convolutions take
the preset's quantizers; the stem convolution, the shortcuts (parameter-free option A) and the classifier stay full
precision. Inputs are images in [0, 1]; normalisation happens inside the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.models.methods import Method, get_method
from arbibench.nn.layers import BinaryConv2d

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class Normalize(nn.Module):
    """Per-channel standardisation, so that attacks work on [0, 1] pixels and never see means or stds."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def _activation(name: str) -> nn.Module:
    return {"relu": nn.ReLU(inplace=False), "hardtanh": nn.Hardtanh()}[name]


class ShortcutA(nn.Module):
    """He et al.'s option A: subsample and zero-pad channels; no parameters, so nothing to binarize."""

    def __init__(self, out_channels: int, in_channels: int) -> None:
        super().__init__()
        self.pad = (out_channels - in_channels) // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, method: Method) -> None:
        super().__init__()
        q = {"input_quantizer": method.input_quantizer, "kernel_quantizer": method.kernel_quantizer}
        self.conv1 = BinaryConv2d(in_planes, planes, 3, stride=stride, padding=1, **q)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = _activation(method.activation)
        self.conv2 = BinaryConv2d(planes, planes, 3, stride=1, padding=1, **q)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = _activation(method.activation)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = ShortcutA(planes, in_planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out)) + self.shortcut(x)
        return self.act2(out)


class CifarResNet(nn.Module):
    def __init__(
        self,
        num_blocks: tuple[int, int, int],
        method: Method | str = "fp",
        num_classes: int = 10,
        mean: tuple[float, ...] = CIFAR10_MEAN,
        std: tuple[float, ...] = CIFAR10_STD,
    ) -> None:
        super().__init__()
        method = get_method(method) if isinstance(method, str) else method
        self.method = method.name
        self.normalize = Normalize(mean, std)
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)  # stem stays full precision
        self.bn1 = nn.BatchNorm2d(16)
        self.act1 = _activation(method.activation)
        layers: list[nn.Module] = []
        in_planes = 16
        for planes, n, stride in zip((16, 32, 64), num_blocks, (1, 2, 2), strict=True):
            for i in range(n):
                layers.append(BasicBlock(in_planes, planes, stride if i == 0 else 1, method))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)  # classifier stays full precision
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(self.normalize(x))))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def resnet20(method: Method | str = "fp", num_classes: int = 10) -> CifarResNet:
    """CIFAR ResNet-20: 3 stages of 3 basic blocks, 16/32/64 channels, ~0.27M parameters."""
    return CifarResNet((3, 3, 3), method, num_classes)


ARCHITECTURES = {"resnet20": resnet20}
