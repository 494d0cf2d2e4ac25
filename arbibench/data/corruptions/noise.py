"""Noise corruptions: Gaussian (sensor), shot (photon counting) and impulse (salt-and-pepper bit errors)."""

from __future__ import annotations

import numpy as np

from arbibench.data.corruptions import params
from arbibench.data.corruptions.filters import to_uint8


def gaussian_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise of standard deviation c on [0, 1] images, per pixel and channel."""
    c = params.at(params.GAUSSIAN_NOISE, severity)
    v = x / 255.0
    return to_uint8(np.clip(v + rng.normal(scale=c, size=v.shape), 0, 1) * 255)


def shot_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson noise: each value becomes a photon count of mean ``value * c``, divided by c."""
    c = params.at(params.SHOT_NOISE, severity)
    v = x / 255.0
    return to_uint8(np.clip(rng.poisson(v * c) / c, 0, 1) * 255)


def impulse_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Salt and pepper: a share c of the pixel values (each channel on its own) set to 0 or 1 with equal odds."""
    c = params.at(params.IMPULSE_NOISE, severity)
    v = x / 255.0
    hit = rng.random(v.shape) < c
    salt = rng.random(v.shape) < 0.5
    v = np.where(hit, np.where(salt, 1.0, 0.0), v)
    return to_uint8(v * 255)
