"""Binary layers: ordinary conv / linear layers whose input and kernel pass through named quantizers.

The latent full-precision weights are what the optimiser updates; the forward pass only ever sees their
quantized version. With both quantizers ``None`` a layer is exactly its full-precision counterpart, which is how a
model and its FP twin share one definition.

Zero padding: a binary convolution here pads its *binarized* input with 0, as PyTorch BNN simulations do
(Bi-Real, IR-Net, ReActNet code). A deployed XNOR kernel cannot hold 0 and pads with +1 or -1 instead; results of
this simulation therefore match the papers' numbers, not necessarily a bit-exact deployment.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import arbibench.nn.scalings  # noqa: F401 - registers the weight binarizers' aliases
import arbibench.nn.zero_sign  # noqa: F401 - registers the torch.sign-convention quantizers of imported models
from arbibench.nn.quantizers import Quantizer, get_quantizer


class BinaryConv2d(nn.Conv2d):
    """Conv2d with an ``input_quantizer`` and a ``kernel_quantizer`` (each an alias, a Quantizer or None)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        bias: bool = False,
        *,
        input_quantizer: str | Quantizer | None = "ste_sign",
        kernel_quantizer: str | Quantizer | None = "ste_sign",
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)
        self.input_quantizer = get_quantizer(input_quantizer, in_channels)
        self.kernel_quantizer = get_quantizer(kernel_quantizer, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_quantizer is not None:
            x = self.input_quantizer(x)
        w = self.weight if self.kernel_quantizer is None else self.kernel_quantizer(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class BinaryLinear(nn.Linear):
    """Linear layer with an ``input_quantizer`` and a ``kernel_quantizer``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        input_quantizer: str | Quantizer | None = "ste_sign",
        kernel_quantizer: str | Quantizer | None = "ste_sign",
    ) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.input_quantizer = get_quantizer(input_quantizer, in_features)
        self.kernel_quantizer = get_quantizer(kernel_quantizer, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_quantizer is not None:
            x = self.input_quantizer(x)
        w = self.weight if self.kernel_quantizer is None else self.kernel_quantizer(self.weight)
        return F.linear(x, w, self.bias)


def count_binary_layers(model: nn.Module) -> int:
    """Number of layers whose kernel is binarized: a quick way to tell a BNN from its FP twin."""
    return sum(
        1 for m in model.modules() if isinstance(m, (BinaryConv2d, BinaryLinear)) and m.kernel_quantizer is not None
    )
