"""Quantizers with ``sign(0) = 0``: the convention of ``torch.sign``, and so of the papers' reference code.

arbibench's own quantizers map 0 to +1, as a deployed XNOR/popcount kernel must. The official training and evaluation
code of ReCU, RBNN, SiMaN, BiPer, IR-Net and ReActNet binarizes with ``torch.sign``, which maps 0 to 0; a network
imported from one of their checkpoints uses the quantizers below so that its forward pass is the one the paper
measured, zero included. (An input exactly 0 is rare in trained float networks, but it is where the two conventions
part, and a binary activation that flips can change every layer after it.)

Each quantizer is an arbibench quantizer whose inner sign is a :class:`ZeroSign`, so the forward is exact and the
backward is still a named, swappable surrogate (:func:`arbibench.nn.use_surrogate` reaches it like any other).

| alias                          | computes                                         | used by              |
| ------------------------------ | ------------------------------------------------ | -------------------- |
| ``zero_sign``                  | sign(x)                                          | ReCU, BiPer          |
| ``zero_ede_sign``              | sign(x), EDE backward at its final temperature   | IR-Net               |
| ``centred_sign``               | sign(x - mean of each sample)                    | RBNN, SiMaN          |
| ``zero_rsign``                 | sign(x - threshold_c)                            | ReActNet             |
| ``zero_channel_scaled_sign``   | mean abs(W_c) * sign(W)                          | ReActNet             |
| ``zero_libra_pb_sign``         | IR-Net's Libra-PB                                | IR-Net               |
| ``zero_learned_scale_sign``    | alpha_c * sign(W)                                | RBNN, SiMaN, BiPer   |
| ``centred_learned_scale_sign`` | alpha_c * sign(W - mean of W_c)                  | ReCU                 |
"""

from __future__ import annotations

import torch

from arbibench.nn.quantizers import Quantizer, RSign, SignQuantizer
from arbibench.nn.scalings import ChannelScaledSign, LearnedScaleSign, LibraPBSign

__all__ = [
    "CentredLearnedScaleSign",
    "CentredSign",
    "ZeroChannelScaledSign",
    "ZeroEDESign",
    "ZeroLearnedScaleSign",
    "ZeroLibraPBSign",
    "ZeroRSign",
    "ZeroSign",
]


class ZeroSign(SignQuantizer):
    """``torch.sign``: -1, 0 or +1; the backward is the named ``surrogate``'s, as for every arbibench sign.

    Computed as arbibench's sign (0 -> +1) minus 1 where the input is exactly 0: the correction is a constant, so
    the values are exact and the surrogate gradient passes through unchanged.
    """

    name = "zero_sign"

    def __init__(self, surrogate: str = "approx_sign") -> None:
        super().__init__(surrogate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) - (x == 0).to(x.dtype)


class ZeroEDESign(ZeroSign):
    """``torch.sign`` with IR-Net's Error Decay Estimator at the end of its schedule (t = 10), the deployed state."""

    name = "zero_ede_sign"

    def __init__(self) -> None:
        super().__init__("ede")


class CentredSign(Quantizer):
    """RBNN's and SiMaN's activation binarizer: the sign of each sample's input minus its mean over (C, H, W).

    Both papers divide the centred input by its standard deviation before the sign; a positive factor leaves every
    sign as it is, so only the centring is computed.
    """

    name = "centred_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign = ZeroSign("approx_sign")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.sign(x - x.mean(dim=tuple(range(1, x.dim())), keepdim=True))
        return out


class ZeroRSign(RSign):
    """ReActNet's RSign, sign(x - alpha_c), with ``torch.sign`` as ReActNet's code computes it."""

    name = "zero_rsign"

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.sign = ZeroSign("approx_sign")


class ZeroChannelScaledSign(ChannelScaledSign):
    """``mean|W_c| * sign(W)`` with ``torch.sign`` (ReActNet's and Bi-Real's HardBinaryConv)."""

    name = "zero_channel_scaled_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign = ZeroSign("ste")


class ZeroLibraPBSign(LibraPBSign):
    """IR-Net's Libra-PB with ``torch.sign`` on the standardised weights."""

    name = "zero_libra_pb_sign"

    def __init__(self) -> None:
        super().__init__()
        self.sign = ZeroSign("ede")


class ZeroLearnedScaleSign(LearnedScaleSign):
    """``alpha_c * sign(W)`` with ``torch.sign``: the learned per-channel scale of RBNN, SiMaN and BiPer.

    Those papers scale the convolution's output by ``alpha_c``; scaling the kernel instead gives the same output
    (the convolution is linear and has no bias). An imported model holds the weights its method derives (rotated,
    ``sin``-mapped, ...) already baked into ``W``.
    """

    name = "zero_learned_scale_sign"

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.sign = ZeroSign("ste")


class CentredLearnedScaleSign(LearnedScaleSign):
    """ReCU's weight binarizer (Xu et al., ICCV 2021): ``alpha_c * sign(W - mean(W_c))``.

    ReCU standardises each output channel's weights and clamps them to ``[-Q(tau), Q(tau)]`` before the sign; the
    division by a positive standard deviation and the clamp at ``Q(tau) > 0`` leave every sign unchanged, so the
    binary kernel is the sign of the centred weights. The weight straight-through estimator is the identity, as
    in ReCU's code.
    """

    name = "centred_learned_scale_sign"

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.sign = ZeroSign("identity")

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        centred = w - w.mean(dim=tuple(range(1, w.dim())), keepdim=True)
        signs: torch.Tensor = self.sign(centred)
        return self.alpha.view(-1, *([1] * (w.dim() - 1))) * signs
