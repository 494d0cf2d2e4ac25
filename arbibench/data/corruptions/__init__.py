"""The 15 CIFAR-10-C corruptions at the severities of Hendrycks & Dietterich's CIFAR generator, reimplemented on
NumPy, Pillow and torch (no OpenCV, scikit-image, SciPy or ImageMagick).

>>> from arbibench.data.corruptions import corrupt
>>> x_c = corrupt(x_uint8_nhwc, "fog", severity=3, seed=0)      # uint8 [N, 32, 32, 3] -> uint8, deterministic

Each corruption is ``f(x, severity, rng) -> x`` on uint8 NHWC batches (the layout of the CIFAR-10-C files) and
draws all its randomness from ``rng``. :func:`corrupt` seeds that generator from ``(seed, corruption, severity,
chunk)`` for every chunk of :data:`CHUNK` images, so an image's corruption depends only on the seed and its position,
never on how many images are generated with it. :func:`corrupt_tensor` does the same on [0, 1] NCHW tensors.

Nobody can reproduce the official CIFAR-10-C files bit for bit (they hold one unseeded draw of the random
corruptions, and some corruptions ran through ImageMagick and OpenCV builds of 2018), so data made here is always
labelled "regenerated".
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import torch

from arbibench.data.corruptions.blur import defocus_blur, glass_blur, motion_blur, zoom_blur
from arbibench.data.corruptions.digital import brightness, contrast, elastic_transform, jpeg_compression, pixelate
from arbibench.data.corruptions.noise import gaussian_noise, impulse_noise, shot_noise
from arbibench.data.corruptions.params import SEVERITIES
from arbibench.data.corruptions.weather import fog, frost, snow

Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]

#: In the order and with the names of the CIFAR-10-C files (Hendrycks & Dietterich's table: noise, blur, weather,
#: digital). RobustBench's own order is :data:`arbibench.data.cifar10c.CORRUPTIONS`.
CORRUPTION_FUNCTIONS: dict[str, Corruption] = {
    "gaussian_noise": gaussian_noise,
    "shot_noise": shot_noise,
    "impulse_noise": impulse_noise,
    "defocus_blur": defocus_blur,
    "glass_blur": glass_blur,
    "motion_blur": motion_blur,
    "zoom_blur": zoom_blur,
    "snow": snow,
    "frost": frost,
    "fog": fog,
    "brightness": brightness,
    "contrast": contrast,
    "elastic_transform": elastic_transform,
    "pixelate": pixelate,
    "jpeg_compression": jpeg_compression,
}
#: Images per independently seeded chunk.
CHUNK = 250


def corruption_rng(seed: int, name: str, severity: int, chunk: int) -> np.random.Generator:
    """The generator of one chunk: keyed by a checksum of the name, so adding a corruption changes no other."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(name.encode()), severity,
                                                                       chunk])))


def corrupt(x: np.ndarray, name: str, severity: int, seed: int = 0, *, first_index: int = 0) -> np.ndarray:
    """``x`` (uint8 [N, 32, 32, 3]) under corruption ``name`` at ``severity``; deterministic given ``seed``.

    ``first_index`` is the dataset position of ``x[0]``; it must be a multiple of :data:`CHUNK`, so that the
    chunks, and with them the random draws, line up with those of a run over the whole test set.
    """
    if name not in CORRUPTION_FUNCTIONS:
        raise ValueError(f"unknown corruption {name!r}; known: {', '.join(CORRUPTION_FUNCTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
    x = np.asarray(x)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3):
        raise ValueError(f"corrupt() takes uint8 images [N, 32, 32, 3] (NHWC), got {x.dtype} {tuple(x.shape)}")
    if first_index % CHUNK:
        raise ValueError(f"first_index must be a multiple of {CHUNK}, got {first_index}")
    fn = CORRUPTION_FUNCTIONS[name]
    out = np.empty_like(x)
    for start in range(0, len(x), CHUNK):
        rng = corruption_rng(seed, name, severity, (first_index + start) // CHUNK)
        out[start : start + CHUNK] = fn(x[start : start + CHUNK], severity, rng)
    return out


def corrupt_tensor(x: torch.Tensor, name: str, severity: int, seed: int = 0) -> torch.Tensor:
    """The same on float images [N, 3, 32, 32] in [0, 1] (rounded to bytes first, as the files store them)."""
    u8 = (x.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    out = corrupt(np.ascontiguousarray(u8), name, severity, seed)
    return torch.from_numpy(out).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


__all__ = ["CHUNK", "CORRUPTION_FUNCTIONS", "SEVERITIES", "corrupt", "corrupt_tensor", "corruption_rng"]
