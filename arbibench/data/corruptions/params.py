"""The CIFAR-10-C severity table: the parameters of the 15 benchmark corruptions at severities 1 to 5.

Every number is the one of Hendrycks & Dietterich's CIFAR generator (*Benchmarking Neural Network Robustness to
Common Corruptions and Perturbations*, ICLR 2019; ``ImageNet-C/create_c/make_cifar_c.py`` in hendrycks/robustness).
They are far milder than the ImageNet-C table (which the ``imagecorruptions`` package uses), because a blur radius or
a noise grain means much more on a 32x32 image. Only the numbers are taken; the implementations are arbibench's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SEVERITIES = (1, 2, 3, 4, 5)

# Noise. gaussian: standard deviation on [0, 1]; shot: photons per unit intensity (fewer = noisier); impulse: share
# of pixel values replaced by salt or pepper.
GAUSSIAN_NOISE = (0.04, 0.06, 0.08, 0.09, 0.10)
SHOT_NOISE = (500, 250, 100, 75, 50)
IMPULSE_NOISE = (0.01, 0.02, 0.03, 0.05, 0.07)

# Blur. defocus: (disk radius, sigma of the 3x3 Gaussian that antialiases the disk); glass: (sigma, max pixel shift,
# shuffling passes); motion: (ImageMagick radius, sigma); zoom: the zoom factors averaged with the image.
DEFOCUS_BLUR = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1))
GLASS_BLUR = ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2))
MOTION_BLUR = ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))
ZOOM_BLUR = tuple(np.arange(1, stop, 0.01) for stop in (1.06, 1.11, 1.16, 1.21, 1.26))

# Weather. snow: (mean, std of the flake noise, zoom, threshold, motion radius, motion sigma, share of the image kept
# unbrightened); frost: (weight of the image, weight of the frost texture); fog: (strength, decay of the fractal).
SNOW = (
    (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
    (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
    (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
    (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
    (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
)
FROST = ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))
FOG = ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))

# Digital. brightness: added to the HSV value; contrast: factor towards the channel mean; elastic: (displacement
# scale, smoothing sigma, affine jitter) in pixels (fractions of the 32-pixel side); pixelate: downscale factor;
# jpeg: quality.
BRIGHTNESS = (0.05, 0.1, 0.15, 0.2, 0.3)
CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)
ELASTIC_TRANSFORM = tuple(
    (32 * a, 32 * s, 32 * j)
    for a, s, j in ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03))
)
PIXELATE = (0.95, 0.9, 0.85, 0.75, 0.65)
JPEG_COMPRESSION = (80, 65, 58, 50, 40)


def at(table: tuple[Any, ...], severity: int) -> Any:  # a row of any of the tables above, whatever its shape
    """The parameters of ``severity`` (1..5) in ``table``; one clear error for any other severity."""
    if isinstance(severity, bool) or not isinstance(severity, int | np.integer) or not 1 <= severity <= 5:
        raise ValueError(f"severity must be an integer from 1 to 5, got {severity!r}")
    return table[int(severity) - 1]
