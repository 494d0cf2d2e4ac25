"""Interval arithmetic in float64 that contains what a float32 network computes, rounding included.

Each bound is a pair of float64 tensors ``(lo, hi)``. An operation maps the interval of its input to an interval of
the exact result and then widens it by an explicit bound on the rounding of the float32 computation it stands for,
so the interval holds the value the network computes in float32, not only the exact one. The float64 evaluation of
the bounds rounds too: every margin uses ``REL = 2**-23``, twice float32's unit roundoff ``2**-24``, and the spare
half covers float64's own rounding (``2**-53`` relative, many times over). ``ABS`` covers the absolute error of an
operation whose result is subnormal.

What each margin assumes about the float32 computation (IEEE float32 with gradual underflow, PyTorch's default):

- a dot product or convolution of ``n`` terms plus a bias, summed in any order, with or without fused
  multiply-adds, is within ``gamma(n + 1) * (sum |w| |x| + |b|)`` of the exact value (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 3.1); TF32, Winograd and FFT convolutions are not covered;
- an elementwise operation rounds its result once: ``REL * |result|``;
- an inference BatchNorm ``a (x - mu) + beta`` is within ``BATCHNORM_ULPS`` float32 ulps of
  ``|a| (|x| + |mu|) + |beta|``: it covers torch's BatchNorm (a fused multiply-add, a vectorised reciprocal square
  root) and the deployed epilogue, which folds the kernel scale and the BatchNorm into ``fl(fl(acc * mul) + add)``
  with ``mul`` and ``add`` rounded to float32 once;
- a deployed binary convolution accumulates exact integers (``arbibench.deploy.semantics``), so only the product by
  its scale and the bias round (the float64 sum of ``+-scale`` terms is exact: every partial sum fits 53 bits).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

REL = 2.0**-23  # one float32 rounding (2**-24) plus room for float64's own
ABS = 2.0**-126  # absolute slack per operation: a float32 result in the subnormal range
BATCHNORM_ULPS = 16
FLOAT64_REL = 2.0**-52

Box = tuple[torch.Tensor, torch.Tensor]


def gamma(n: int, unit: float = REL) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of a sum of ``n + 1`` terms in any order."""
    if n * unit >= 1:
        raise ValueError(f"a float32 sum of {n} terms has no useful error bound")
    return n * unit / (1 - n * unit)


def magnitude(box: Box) -> torch.Tensor:
    """``max(|lo|, |hi|)``: the largest absolute value the interval holds."""
    return torch.maximum(box[0].abs(), box[1].abs())


def widen(box: Box, err: torch.Tensor | float) -> Box:
    return box[0] - err, box[1] + err


def rounded(box: Box, ulps: float = 1.0) -> Box:
    """An elementwise float32 operation's result, ``ulps`` roundings of its own magnitude wide."""
    return widen(box, ulps * REL * magnitude(box) + ABS)


LinearOp = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def linear(box: Box, weight: torch.Tensor, bias: torch.Tensor | None, op: LinearOp, fan_in: int,
           exact_sum_bound: torch.Tensor | None = None) -> Box:
    """``op(x, weight) + bias`` over the box, centre-radius form.

    ``exact_sum_bound``: for a binary convolution whose sum is exact, the bound per output channel of
    ``sum |w| |x|`` (inputs within [-1, 1]); the margin is then that of the float32 products by the scale and of
    the bias, not the sum's. Otherwise the float32 sum's.
    """
    lo, hi = box
    mid, rad = (lo + hi) * 0.5, (hi - lo) * 0.5
    centre = op(mid, weight)
    spread = op(rad, weight.abs())
    absb = torch.zeros(()) if bias is None else bias.abs()
    if exact_sum_bound is not None:  # the float64 sum is exact too; two float32 roundings: the scale, the bias
        shape = (1, -1, *([1] * (centre.dim() - 2)))
        err = (REL + gamma(fan_in + 1, FLOAT64_REL)) * (exact_sum_bound.view(shape) + absb.view(shape)) + ABS
    else:
        mag = op(mid.abs() + rad, weight.abs())
        if bias is not None:
            mag = mag + absb.view(1, -1, *([1] * (centre.dim() - 2)))
        err = gamma(fan_in + 1) * mag + (fan_in + 1) * ABS
    if bias is not None:
        centre = centre + bias.view(1, -1, *([1] * (centre.dim() - 2)))
    return centre - spread - err, centre + spread + err


def affine(box: Box, a: torch.Tensor, mu: torch.Tensor, beta: torch.Tensor) -> Box:
    """An inference BatchNorm, ``a (x - mu) + beta`` per channel (``a`` of either sign), with its margin."""
    shape = (1, -1, *([1] * (box[0].dim() - 2)))
    a, mu, beta = a.view(shape), mu.view(shape), beta.view(shape)
    y1, y2 = a * (box[0] - mu) + beta, a * (box[1] - mu) + beta
    err = BATCHNORM_ULPS * REL / 2 * (a.abs() * (magnitude(box) + mu.abs()) + beta.abs()) + ABS
    return torch.minimum(y1, y2) - err, torch.maximum(y1, y2) + err


def normalize(box: Box, mean: torch.Tensor, std: torch.Tensor) -> Box:
    """``(x - mean) / std`` per channel, ``std > 0``: two roundings."""
    shape = (1, -1, *([1] * (box[0].dim() - 2)))
    mean, std = mean.view(shape), std.view(shape)
    err = 2 * REL * (magnitude(box) + mean.abs()) / std + ABS
    return (box[0] - mean) / std - err, (box[1] - mean) / std + err


def add(a: Box, b: Box) -> Box:
    """A residual add: one rounding."""
    return rounded((a[0] + b[0], a[1] + b[1]))


def prelu(box: Box, slope: torch.Tensor) -> Box:
    """``x if x >= 0 else slope x`` per channel, ``slope`` of either sign: the extremes lie at lo, hi or 0."""
    shape = (1, -1, *([1] * (box[0].dim() - 2))) if slope.numel() > 1 else (1,) * box[0].dim()
    s = slope.view(shape)
    lo, hi = box

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.where(t >= 0, t, s * t)

    flo, fhi = f(lo), f(hi)
    spans_zero = (lo < 0) & (hi > 0)
    zero = torch.zeros_like(lo)
    out_lo = torch.minimum(torch.minimum(flo, fhi), torch.where(spans_zero, zero, flo))
    out_hi = torch.maximum(torch.maximum(flo, fhi), torch.where(spans_zero, zero, fhi))
    return rounded((out_lo, out_hi))


def average(box: Box, pool: Callable[[torch.Tensor], torch.Tensor], count: int) -> Box:
    """An average over ``count`` values (a sum and a division): monotone, the float32 sum's margin."""
    return widen((pool(box[0]), pool(box[1])), gamma(count + 1) * pool(magnitude(box)) + ABS)


def global_average(box: Box) -> Box:
    """``adaptive_avg_pool2d(x, 1).flatten(1)``: the mean of each channel's map."""
    h, w = box[0].shape[-2:]
    return average(box, lambda t: F.adaptive_avg_pool2d(t, 1).flatten(1), h * w)


def sum_error(n: int, mean_magnitude: torch.Tensor) -> torch.Tensor:
    """The bound on ``|fl(mean(x)) - mean(x)|`` for ``n`` values, any summation order, then one division."""
    return gamma(n + 1) * mean_magnitude + ABS
