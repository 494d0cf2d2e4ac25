"""VGG-small, the CIFAR-10 VGG of LQ-Net and Bi-Real Net's CIFAR experiments, parametrised by a method preset.

Six 3x3 convolutions (128, 128, 256, 256, 512, 512 channels) with a 2x2 max pool after every second one, then one
linear classifier. The first convolution and the classifier stay full precision; the five inner convolutions take
the preset's quantizers. A VGG has no shortcuts, so the preset's ``shortcut`` and ``downsample`` do not apply.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from arbibench.models.methods import Method, get_method
from arbibench.models.resnet import CIFAR10_MEAN, CIFAR10_STD, Normalize
from arbibench.nn.activations import build_activation
from arbibench.nn.layers import BinaryConv2d

WIDTHS = (128, 128, 256, 256, 512, 512)


class VGGSmall(nn.Module):
    def __init__(self, method: Method | str = "fp", num_classes: int = 10) -> None:
        super().__init__()
        method = get_method(method) if isinstance(method, str) else method
        self.method = method.name
        self.normalize = Normalize(CIFAR10_MEAN, CIFAR10_STD)
        q: dict[str, Any] = {"input_quantizer": method.input_quantizer, "kernel_quantizer": method.kernel_quantizer}
        layers: list[nn.Module] = []
        in_ch = 3
        for i, width in enumerate(WIDTHS):
            conv = nn.Conv2d(in_ch, width, 3, padding=1, bias=False) if i == 0 else BinaryConv2d(
                in_ch, width, 3, padding=1, **q
            )
            pool: list[nn.Module] = [nn.MaxPool2d(2)] if i % 2 == 1 else []
            layers += [conv, *pool, nn.BatchNorm2d(width), build_activation(method.activation, width)]
            in_ch = width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(512 * 4 * 4, num_classes)  # classifier stays full precision
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.fc(self.features(self.normalize(x)).flatten(1))
        return logits


def vgg_small(method: Method | str = "fp", num_classes: int = 10) -> VGGSmall:
    """VGG-small for 32x32 inputs (~4.7M parameters)."""
    return VGGSmall(method, num_classes)
