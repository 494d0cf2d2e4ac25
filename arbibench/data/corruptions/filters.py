"""Image filters the corruptions are built from, on batches of float images ``[N, H, W, C]`` (or ``[N, H, W]``).

Each filter states the border rule of the library the published generator called, because on a 32x32 image the
border is a large part of the picture: ``"nearest"`` repeats the edge pixel (scipy ``nearest``, ImageMagick's
edge), ``"reflect101"`` mirrors about the edge pixel (OpenCV's default ``BORDER_REFLECT_101``), ``"symmetric"``
mirrors including the edge pixel (scipy ``reflect``).

The same seed must give the same bytes on every CPU, and the corruptions store floats truncated to bytes, where a
flat region blurred to exactly 128.0 on one machine and 127.99999999999997 on another becomes 128 and 127. So the
filters use only arithmetic whose rounding no CPU feature changes: elementwise NumPy operations in a fixed order
(no BLAS or convolution kernels, whose summation order follows the SIMD width) and kernel weights from
:func:`exp_weights` (NumPy's vectorised ``exp`` differs by an ulp between its AVX-512 and AVX2 code paths).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

_NP_PAD: dict[str, Literal["edge", "reflect", "symmetric"]] = {
    "nearest": "edge", "reflect101": "reflect", "symmetric": "symmetric",
}


def _spatial_pad(x: np.ndarray, r: int, mode: str) -> np.ndarray:
    widths = [(0, 0), (r, r), (r, r)] + [(0, 0)] * (x.ndim - 3)
    result: np.ndarray = np.pad(x, widths, mode=_NP_PAD[mode])
    return result


def exp_weights(exponents: np.ndarray) -> np.ndarray:
    """``exp(exponents)`` normalised to sum 1, the same bits on every CPU: the C library's scalar ``exp`` (an ulp of
    error at most), rounded to float32 precision (an ulp of float64 survives that only for a value within an ulp of
    a float32 rounding boundary, about one chance in 5e8), and a correctly rounded sum (``math.fsum``) to
    normalise."""
    w = np.array([float(np.float32(math.exp(float(e)))) for e in np.ravel(exponents)], dtype=np.float64)
    result: np.ndarray = (w / math.fsum(w)).reshape(np.shape(exponents))
    return result


def gaussian_kernel1d(sigma: float, radius: int) -> np.ndarray:
    """Normalised samples of a Gaussian at -radius..radius (scipy's and OpenCV's construction)."""
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    return exp_weights(-0.5 * (t / sigma) ** 2)


def gaussian_blur(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """Separable Gaussian over the two spatial axes, radius ``int(truncate * sigma + 0.5)`` (scipy's rule).

    A sigma below 1e-15 leaves the image unchanged, as scipy does.
    """
    if sigma <= 1e-15:
        return x.astype(np.float64, copy=True)
    r = int(truncate * sigma + 0.5)
    k = gaussian_kernel1d(sigma, r)
    p = _spatial_pad(np.asarray(x, dtype=np.float64), r, mode)
    h, w = x.shape[1], x.shape[2]
    rows = sum(k[i] * p[:, i : i + h] for i in range(2 * r + 1))
    result: np.ndarray = sum(k[i] * rows[:, :, i : i + w] for i in range(2 * r + 1))
    return result


def correlate2d(x: np.ndarray, kernel: np.ndarray, mode: str = "reflect101") -> np.ndarray:
    """Every channel of ``x`` [N, H, W, C] correlated with one odd-sized 2-D ``kernel`` (OpenCV's ``filter2D``)."""
    r = kernel.shape[0] // 2
    p = _spatial_pad(np.asarray(x, dtype=np.float64), r, mode)
    h, w = p.shape[1] - 2 * r, p.shape[2] - 2 * r
    out = np.zeros((p.shape[0], h, w, *p.shape[3:]), dtype=np.float64)
    for i in range(2 * r + 1):  # one tap at a time, in raster order: the same sums on every CPU
        for j in range(2 * r + 1):
            if kernel[i, j] != 0.0:
                out += kernel[i, j] * p[:, i : i + h, j : j + w]
    return out


def fold_index(i: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Integer pixel indices outside ``0..n-1`` brought back inside by the border rule ``mode``."""
    if mode == "nearest":
        result: np.ndarray = np.clip(i, 0, n - 1)
        return result
    if mode == "reflect101":
        if n == 1:
            return np.zeros_like(i)
        period = 2 * (n - 1)
        i = np.mod(i, period)
        return np.where(i >= n, period - i, i)
    if mode == "symmetric":
        period = 2 * n
        i = np.mod(i, period)
        return np.where(i >= n, period - 1 - i, i)
    raise ValueError(f"unknown border mode {mode!r}; use nearest, reflect101 or symmetric")


def sample_bilinear(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, mode: str) -> np.ndarray:
    """``x`` [N, H, W, C] read at fractional (row, col) positions [N, h, w] with bilinear weights."""
    n, h, w = x.shape[:3]
    r0, c0 = np.floor(rows), np.floor(cols)
    fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
    r0, c0 = r0.astype(np.int64), c0.astype(np.int64)
    ra, rb = fold_index(r0, h, mode), fold_index(r0 + 1, h, mode)
    ca, cb = fold_index(c0, w, mode), fold_index(c0 + 1, w, mode)
    b = np.arange(n).reshape(-1, *([1] * (rows.ndim - 1)))
    top = x[b, ra, ca] * (1 - fc) + x[b, ra, cb] * fc
    bottom = x[b, rb, ca] * (1 - fc) + x[b, rb, cb] * fc
    result: np.ndarray = top * (1 - fr) + bottom * fr
    return result


def clipped_zoom(x: np.ndarray, factor: float) -> np.ndarray:
    """Zoom into the centre of ``x`` [N, H, W, C] (H == W) by ``factor`` >= 1 and keep the central H x W.

    The central ``ceil(H / factor)`` square is resized to ``round(side * factor)`` pixels with linear interpolation
    (scipy ``zoom(order=1)``: output pixel k reads input position ``k * (side - 1) / (out - 1)``), then trimmed.
    """
    h = x.shape[1]
    side = int(np.ceil(h / factor))
    top = (h - side) // 2
    crop = x[:, top : top + side, top : top + side]
    out = int(round(side * factor))
    pos = np.arange(out) * ((side - 1) / (out - 1)) if out > 1 else np.zeros(1)
    grid_r = np.broadcast_to(pos[None, :, None], (x.shape[0], out, out))
    grid_c = np.broadcast_to(pos[None, None, :], (x.shape[0], out, out))
    zoomed = sample_bilinear(crop, grid_r, grid_c, "nearest")
    trim = (out - h) // 2
    return zoomed[:, trim : trim + h, trim : trim + h]


def motion_smear(x: np.ndarray, radius: float, sigma: float, angles: np.ndarray) -> np.ndarray:
    """ImageMagick's motion blur (``MotionBlurImage``) of ``x`` [N, H, W(, C)], one angle in degrees per image.

    ImageMagick averages ``2 * ceil(radius) + 1`` pixels behind each pixel along the angle, weighted by a one-sided
    Gaussian ``exp(-i^2 / (2 sigma^2))`` normalised to 1; the i-th tap is ``(round(i cos a), round(i sin a))``
    pixels away (x to the right, y down) and reads the nearest edge pixel past the border.
    """
    n, h, w = x.shape[:3]
    width = int(2 * math.ceil(radius) + 1)
    i = np.arange(width, dtype=np.float64)
    weights = exp_weights(-(i**2) / (2.0 * sigma * sigma))
    a = np.deg2rad(np.asarray(angles, dtype=np.float64)).reshape(n, 1)
    dx = np.ceil(i[None] * np.cos(a) - 0.5).astype(np.int64)  # [N, width]
    dy = np.ceil(i[None] * np.sin(a) - 0.5).astype(np.int64)
    b = np.arange(n)[:, None, None]
    rr = np.arange(h)[None, :, None]
    cc = np.arange(w)[None, None, :]
    out = np.zeros(x.shape, dtype=np.float64)
    for k in range(width):
        rows = np.clip(rr + dy[:, k, None, None], 0, h - 1)
        cols = np.clip(cc + dx[:, k, None, None], 0, w - 1)
        out += weights[k] * x[b, rows, cols]
    return out


def to_uint8(v255: np.ndarray) -> np.ndarray:
    """Float pixel values on 0..255 stored as bytes the way the published generator stores them: ``np.uint8``
    truncates towards zero (values are clipped to 0..255 first, which it did in each corruption)."""
    result: np.ndarray = np.clip(v255, 0, 255).astype(np.uint8)
    return result
