"""The emulator of ``deployed``: pure torch, no compiled code, the reference every kernel is tested against.

A float32 convolution of the deployed activations (+-1, or with torch.sign's 0, or {0, 1}) with the *unscaled*
kernel of -1, 0, +1 computes integers: every partial sum is an integer of magnitude at most ``C * KH * KW``, far
below ``2**24``, so float32 holds each exactly and the summation order (im2col, oneDNN's blocking, threads) cannot
change the result. The epilogue is then the deployed one, two float32 roundings (:func:`semantics.epilogue`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from arbibench.deploy.semantics import BinaryConvSpec, activation_values, epilogue

# Far more than any real layer: beyond it a sum of +-1 terms could leave float32's exact integers.
MAX_EXACT_TERMS = 1 << 24


def emulate_conv(d: torch.Tensor, spec: BinaryConvSpec) -> torch.Tensor:
    """The deployed output of ``spec`` for the sign's argument ``d`` (N, C, H, W), float32 (N, O, OH, OW)."""
    o, c, kh, kw = spec.signs.shape
    if c * kh * kw >= MAX_EXACT_TERMS:
        raise ValueError(f"{spec.name}: {c * kh * kw} terms per output could leave float32's exact integers")
    a = activation_values(d, spec.alphabet)
    if spec.pad_value:
        ph, pw = spec.padding
        a = F.pad(a, (pw, pw, ph, ph), value=float(spec.pad_value))
        acc = F.conv2d(a, spec.signs, None, spec.stride, 0)
    else:
        acc = F.conv2d(a, spec.signs, None, spec.stride, spec.padding)
    return epilogue(acc, spec.mul, spec.add)
