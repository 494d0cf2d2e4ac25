"""Weight binarizers with the scaling of each BNN family: the kernel quantizers of a binary layer.

All of them compute ``scale * sign(W)`` in the forward pass (sign(0) = +1) and differ in the scale and in the
backward they use. The scale is what lets a binary convolution approximate its real-valued twin; it costs one
multiplication per output channel at inference, so it does not break the XNOR/popcount kernel.

| alias                  | scale                                   | method                        |
| ---------------------- | --------------------------------------- | ----------------------------- |
| ``ste_sign``           | none (1)                                | BinaryNet                     |
| ``channel_scaled_sign``| mean abs(W) per output channel          | XNOR-Net, Bi-Real, ReActNet   |
| ``layer_scaled_sign``  | mean abs(W) over the whole layer        | DoReFa-Net (1-bit weights)    |
| ``libra_pb_sign``      | 2^round(log2 mean abs(W_std)), W_std    | IR-Net (Libra-PB)             |
|                        | standardised per output channel         |                               |
| ``learned_scale_sign`` | a learned scale per output channel      | XNOR-Net++                    |
"""

from __future__ import annotations

import torch
from torch import nn

from arbibench.nn.quantizers import EDESign, Quantizer, SignQuantizer


def _mean_abs_per_channel(w: torch.Tensor) -> torch.Tensor:
    return w.abs().mean(dim=tuple(range(1, w.dim())), keepdim=True)


class ChannelScaledSign(Quantizer):
    """``mean|W_c| * sign(W)`` per output channel ``c`` (Rastegari et al. 2016; Liu et al. 2018).

    The scale is a constant in the backward and the sign takes the clipped straight-through estimator, so the
    weight gradient is ``scale * 1{|w| <= 1}``. (Bi-Real's and ReActNet's reference code pass it without the
    scale; under Adam, which normalises each parameter's step, the two train alike.)
    """

    name = "channel_scaled_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign = SignQuantizer("ste")

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        signs: torch.Tensor = self.sign(w)
        return _mean_abs_per_channel(w).detach() * signs


class LayerScaledSign(Quantizer):
    """``mean|W| * sign(W)`` with one scale for the whole layer (Zhou et al. 2016, DoReFa-Net, 1-bit weights)."""

    name = "layer_scaled_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign = SignQuantizer("identity")  # DoReFa's straight-through estimator passes the gradient unchanged

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        signs: torch.Tensor = self.sign(w)
        return w.abs().mean().detach() * signs


class LibraPBSign(Quantizer):
    """IR-Net's Libra Parameter Binarization (Qin et al., CVPR 2020).

    Each output channel's weights are standardised (zero mean, unit std), which maximises the information entropy
    of their signs, then binarized with the EDE backward; the scale is the power of two nearest to the mean
    magnitude of the standardised weights, so it is a bit shift at inference.
    """

    name = "libra_pb_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign: SignQuantizer = EDESign()

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(1, w.dim()))
        centred = w - w.mean(dim=dims, keepdim=True)
        standardised = centred / centred.std(dim=dims, keepdim=True).clamp_min(1e-12)
        scale = torch.pow(2.0, torch.round(torch.log2(_mean_abs_per_channel(standardised)))).detach()
        signs: torch.Tensor = self.sign(standardised)
        return scale * signs


class LearnedScaleSign(Quantizer):
    """``alpha_c * sign(W)`` with ``alpha`` a trained parameter per output channel (Bulat & Tzimiropoulos, BMVC 2019).

    XNOR-Net++ fuses the weight and activation scales into one factor learned by back-propagation instead of
    computing it analytically; this is its simplest form, one factor per output channel (their case 1). ``alpha``
    starts at 1; the batch norm after the convolution absorbs the overall magnitude.
    """

    name = "learned_scale_sign"
    per_channel = True

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels, 1, 1, 1))
        self.sign = SignQuantizer("ste")

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.view(-1, *([1] * (w.dim() - 1)))
        signs: torch.Tensor = self.sign(w)
        return alpha * signs

