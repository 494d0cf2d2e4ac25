"""The backbones by name: every method preset builds on every one of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from arbibench.models.methods import Method
from arbibench.models.resnet import resnet18, resnet18_imagenet, resnet20
from arbibench.models.vgg import vgg_small


@dataclass(frozen=True)
class Architecture:
    name: str
    build: Callable[..., nn.Module]
    dataset: str  # the dataset whose input size and class count it is built for
    input_size: int


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("resnet20", resnet20, "cifar10", 32),
        Architecture("resnet18", resnet18, "cifar10", 32),
        Architecture("vgg_small", vgg_small, "cifar10", 32),
        Architecture("resnet18_imagenet", resnet18_imagenet, "imagenet", 224),
    )
}


def build_model(arch: str, method: Method | str) -> nn.Module:
    """A freshly initialised ``arch`` with ``method``'s binarization, or ValueError naming the known backbones."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(sorted(ARCHITECTURES))}")
    return ARCHITECTURES[arch].build(method)
