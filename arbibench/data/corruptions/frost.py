"""Procedural frost textures, standing in for the frost photographs of the published generator.

Those photographs are not redistributable here, so arbibench draws ice from a fixed seed: a fractal haze of rime
plus branching needles of hoarfrost, blue-white, at the scale the generator used (its photos shrunk to a fifth,
so a 32x32 crop holds a few crystals). The textures are matched to the statistics of the generator's first five
photos shrunk to a fifth (the ones ``imagecorruptions`` 1.1.2 ships; measured, not copied): a bright layer of ice,
grey level 164/255 on average (124 to 207 from photo to photo), bluish (blue over green over red), and smooth, with
a standard deviation of about 15 grey levels inside a 32x32 crop. The blend ``a * image + b * ice`` then brightens
and washes out an image as much as the photos do. The textures are the same on every machine; they are not the
photos, so frost is still the corruption furthest from the official files.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

TEXTURE_SIZE = 160
N_TEXTURES = 5  # the published generator draws from its first five photographs
TINT = np.array([0.80, 0.90, 1.0])  # ice is blue-white (the photos' red:green:blue is about 0.87:1:1.07)
# Mean grey level of each texture in [0, 1]: an average of 0.65 (165/255), spread like the photos' 0.48..0.81.
LEVELS = (0.50, 0.80, 0.66, 0.58, 0.70)
HAZE_AMPLITUDE = 0.30  # rime: slow variation across a crop
NEEDLE_AMPLITUDE = 0.35  # hoarfrost: the fine bright strokes


def _haze(rng: np.random.Generator, size: int) -> np.ndarray:
    """Fractal value noise in [0, 1]: octaves of bilinearly upsampled random grids, halving in weight."""
    out = np.zeros((size, size))
    total = 0.0
    for octave, cells in enumerate((5, 10, 20, 40, 80)):
        grid = Image.fromarray(rng.random((cells, cells)).astype(np.float32), mode="F")
        layer = np.asarray(grid.resize((size, size), Image.Resampling.BILINEAR), dtype=np.float64)
        weight = 0.5**octave
        out += weight * layer
        total += weight
    out /= total
    result: np.ndarray = (out - out.min()) / (out.max() - out.min())
    return result


def _needles(rng: np.random.Generator, size: int) -> np.ndarray:
    """Branching hoarfrost needles in [0, 1]: random walks of short straight strokes that fork, drawn in grey."""
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    for _ in range(60):
        stack = [(rng.uniform(0, size), rng.uniform(0, size), rng.uniform(0, 2 * np.pi), 0)]
        while stack:
            x, y, angle, depth = stack.pop()
            length = rng.uniform(4, 14) / (1 + 0.6 * depth)
            x2, y2 = x + length * np.cos(angle), y + length * np.sin(angle)
            draw.line([(x, y), (x2, y2)], fill=int(rng.uniform(150, 255) / (1 + 0.3 * depth)), width=1)
            if depth < 3:
                for turn in (-1, 1):
                    if rng.random() < 0.6:
                        stack.append((x2, y2, angle + turn * rng.uniform(0.4, 1.1), depth + 1))
                stack.append((x2, y2, angle + rng.normal(0, 0.2), depth + 1))
    soft = img.filter(ImageFilter.GaussianBlur(0.6))
    return np.maximum(np.asarray(img, dtype=np.float64), np.asarray(soft, dtype=np.float64) * 1.5).clip(0, 255) / 255


@functools.cache
def frost_texture(index: int) -> np.ndarray:
    """Texture ``index`` (0..4) as uint8 RGB [TEXTURE_SIZE, TEXTURE_SIZE, 3]; fixed, independent of any seed."""
    if not 0 <= index < N_TEXTURES:
        raise ValueError(f"frost texture index must be in 0..{N_TEXTURES - 1}, got {index}")
    rng = np.random.default_rng([0xF205, index])
    haze = _haze(rng, TEXTURE_SIZE)
    needles = _needles(rng, TEXTURE_SIZE)
    grey = LEVELS[index] + HAZE_AMPLITUDE * (haze - haze.mean()) + NEEDLE_AMPLITUDE * (needles - needles.mean())
    rgb = grey[..., None] * (TINT / TINT.mean()) * 255  # tinted at the same mean grey level
    result: np.ndarray = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    return result
