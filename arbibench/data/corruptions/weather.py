"""Weather corruptions: snow (falling flakes, motion-blurred, and a whitened scene), frost (ice on the lens) and fog
(a fractal cloud over a darkened image)."""

from __future__ import annotations

import numpy as np

from arbibench.data.corruptions import params
from arbibench.data.corruptions.filters import clipped_zoom, motion_smear, to_uint8
from arbibench.data.corruptions.fractal import plasma_fractal
from arbibench.data.corruptions.frost import N_TEXTURES, frost_texture


def snow(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Flakes: thresholded, zoomed Gaussian noise, motion-blurred at -135..-45 degrees (falling), added to the
    image twice (once turned by 180 degrees) over a scene brightened towards ``1.5 * grey + 0.5``."""
    loc, scale, zoom, threshold, radius, sigma, keep = params.at(params.SNOW, severity)
    v = x.astype(np.float32) / 255.0
    n, h, w = v.shape[:3]
    flakes = rng.normal(loc=loc, scale=scale, size=(n, h, w, 1))
    flakes = clipped_zoom(flakes, zoom)
    flakes[flakes < threshold] = 0
    flakes = to_uint8(np.clip(flakes[..., 0], 0, 1) * 255).astype(np.float64)  # the 8-bit layer ImageMagick blurs
    angles = np.asarray(rng.uniform(-135, -45, size=n), dtype=np.float64)
    flakes = np.clip(np.rint(motion_smear(flakes, radius, sigma, angles)), 0, 255)[..., None] / 255.0
    grey = (0.299 * v[..., 0] + 0.587 * v[..., 1] + 0.114 * v[..., 2])[..., None]
    v = keep * v + (1 - keep) * np.maximum(v, grey * 1.5 + 0.5)
    return to_uint8(np.clip(v + flakes + np.rot90(flakes, k=2, axes=(1, 2)), 0, 1) * 255)


def frost(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """``a * image + b * ice``: a random 32x32 crop of one of the five frost textures, on the 0..255 scale."""
    a, b = params.at(params.FROST, severity)
    n, h, w = x.shape[:3]
    which = np.asarray(rng.integers(N_TEXTURES, size=n))
    out = np.empty(x.shape, dtype=np.float64)
    for i in range(n):
        tex = frost_texture(int(which[i]))
        r0, c0 = rng.integers(0, tex.shape[0] - h), rng.integers(0, tex.shape[1] - w)
        out[i] = a * x[i] + b * tex[r0 : r0 + h, c0 : c0 + w]
    return to_uint8(out)


def fog(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """A plasma-fractal cloud of strength c added to the image, rescaled by ``max / (max + c)`` to keep the range."""
    strength, decay = params.at(params.FOG, severity)
    v = x / 255.0
    top = v.max(axis=(1, 2, 3), keepdims=True)
    cloud = plasma_fractal(len(v), rng, size=32, decay=decay)[:, : v.shape[1], : v.shape[2], None]
    v = v + strength * cloud
    return to_uint8(np.clip(v * top / (top + strength), 0, 1) * 255)
