"""Blur corruptions: defocus (a lens disk), glass (frosted glass: blur, local pixel shuffling, blur), motion (camera
shake along a random direction) and zoom (averaging the image with zoomed-in copies of itself)."""

from __future__ import annotations

import numpy as np

from arbibench.data.corruptions import params
from arbibench.data.corruptions.filters import (
    clipped_zoom,
    correlate2d,
    gaussian_blur,
    gaussian_kernel1d,
    motion_smear,
    to_uint8,
)


def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """A normalised disk of ``radius`` pixels on a 17x17 grid, softened by a 3x3 Gaussian of sigma ``alias_blur``
    (OpenCV's ``GaussianBlur`` with its mirrored border), so that sub-pixel radii still blur a little."""
    half = max(8, int(np.ceil(radius)))
    t = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(t, t)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    ksize = 3 if radius <= 8 else 5
    g = gaussian_kernel1d(alias_blur, ksize // 2)
    return correlate2d(disk[None, :, :, None], np.outer(g, g), "reflect101")[0, :, :, 0]


def _trim_zeros(kernel: np.ndarray) -> np.ndarray:
    """The kernel without its all-zero outer rings (same result, far fewer multiplications for small radii)."""
    r = kernel.shape[0] // 2
    while r > 0 and not kernel[[0, -1], :].any() and not kernel[:, [0, -1]].any():
        kernel, r = kernel[1:-1, 1:-1], r - 1
    return kernel


def defocus_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Each channel convolved with the antialiased disk (mirrored border, as OpenCV's ``filter2D``)."""
    radius, alias = params.at(params.DEFOCUS_BLUR, severity)
    out = correlate2d(x / 255.0, _trim_zeros(disk_kernel(radius, alias)), "reflect101")
    return to_uint8(np.clip(out, 0, 1) * 255)


def glass_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur, then ``passes`` rounds of local pixel displacement, then the same blur again.

    In a round, every pixel (h, w) with 2 <= h, w <= 31 takes the value of its neighbour (h + dy, w + dx), with
    dy, dx drawn from ``-max_delta .. max_delta - 1`` (so {-1, 0} for CIFAR). That is what the published code
    computes: its tuple swap of NumPy row views copies the neighbour instead of swapping, and since it walks from
    the bottom-right corner every neighbour is read before it is overwritten, so a round is one vectorised gather.
    """
    sigma, delta, passes = params.at(params.GLASS_BLUR, severity)
    v = to_uint8(gaussian_blur(x / 255.0, sigma, "nearest") * 255)
    n, h, w = v.shape[:3]
    b = np.arange(n)[:, None, None]
    hh = np.arange(delta + 1, h)[None, :, None]
    ww = np.arange(delta + 1, w)[None, None, :]
    for _ in range(passes):
        d = rng.integers(-delta, delta, size=(n, h - delta - 1, w - delta - 1, 2))
        shuffled = v.copy()
        shuffled[:, delta + 1 :, delta + 1 :] = v[b, hh + d[..., 1], ww + d[..., 0]]
        v = shuffled
    return to_uint8(np.clip(gaussian_blur(v / 255.0, sigma, "nearest"), 0, 1) * 255)


def motion_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageMagick's motion blur along an angle drawn uniformly from -45..45 degrees, rounded to bytes."""
    radius, sigma = params.at(params.MOTION_BLUR, severity)
    angles = rng.uniform(-45, 45, size=len(x))
    smeared = motion_smear(x.astype(np.float64), radius, sigma, angles)
    result: np.ndarray = np.clip(np.rint(smeared), 0, 255).astype(np.uint8)
    return result


def zoom_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """The mean of the image and its centre zoomed by each factor of the severity (no randomness)."""
    factors = params.at(params.ZOOM_BLUR, severity)
    v = (x / 255.0).astype(np.float32)
    out = np.zeros_like(v, dtype=np.float64)
    for f in factors:
        out += clipped_zoom(v, float(f))
    return to_uint8(np.clip((v + out) / (len(factors) + 1), 0, 1) * 255)
