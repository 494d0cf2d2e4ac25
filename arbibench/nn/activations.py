"""Activations placed between binary convolutions, by name, including ReActNet's RPReLU.

In a BNN the sign of the next layer is already the non-linearity; the activation after the batch norm mostly
shapes the distribution the next sign sees (hardtanh keeps it in the straight-through estimator's range, RPReLU
shifts and reshapes it per channel).
"""

from __future__ import annotations

import torch
from torch import nn


class RPReLU(nn.Module):
    """ReActNet's RPReLU (Liu et al., ECCV 2020): ``PReLU(x - gamma_c) + zeta_c`` with learnable shifts per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.shift_in = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.prelu = nn.PReLU(channels, init=0.25)
        self.shift_out = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1, *([1] * (x.dim() - 2)))  # channels are dim 1, for (N, C, H, W) and (N, C) inputs alike
        out: torch.Tensor = self.prelu(x - self.shift_in.view(shape))
        return out + self.shift_out.view(shape)


ACTIVATIONS = ("relu", "hardtanh", "prelu", "rprelu", "identity")


def build_activation(name: str, channels: int) -> nn.Module:
    """A fresh activation module: ``relu``, ``hardtanh``, ``prelu`` (per channel), ``rprelu`` or ``identity``."""
    if name == "relu":
        return nn.ReLU()
    if name == "hardtanh":
        return nn.Hardtanh()
    if name == "prelu":
        return nn.PReLU(channels)
    if name == "rprelu":
        return RPReLU(channels)
    if name == "identity":
        return nn.Identity()
    raise ValueError(f"unknown activation {name!r}; known: {', '.join(ACTIVATIONS)}")
