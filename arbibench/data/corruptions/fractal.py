"""Plasma fractal (the diamond-square algorithm): the cloud pattern of the fog corruption."""

from __future__ import annotations

import numpy as np


def plasma_fractal(n: int, rng: np.random.Generator, size: int = 32, decay: float = 3.0) -> np.ndarray:
    """``n`` periodic height maps [n, size, size] scaled to [0, 1]; a larger ``decay`` gives smoother clouds.

    Diamond-square on a torus, starting from a zero corner: at each level the centre of every square, then the
    middle of every edge, is set to a quarter of the sum of its four neighbours plus uniform noise; the noise
    amplitude starts at 100 * 100 (the published generator's jitter, ``w * uniform(-w, w)`` with ``w = 100``) and
    ``w`` is divided by ``decay`` per level.
    """
    if size & (size - 1):
        raise ValueError(f"plasma_fractal needs a power-of-two size, got {size}")
    m = np.zeros((n, size, size))
    step, w = size, 100.0

    def jitter(total: np.ndarray) -> np.ndarray:
        return total / 4 + w * rng.uniform(-w, w, total.shape)

    while step >= 2:
        half = step // 2
        corners = m[:, ::step, ::step]
        squares = corners + np.roll(corners, -1, axis=1)
        squares = squares + np.roll(squares, -1, axis=2)
        m[:, half::step, half::step] = jitter(squares)
        centres = m[:, half::step, half::step]
        corners = m[:, ::step, ::step]
        # edge midpoints on the rows of the corners: left and right corner, centre below and above
        top = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        m[:, ::step, half::step] = jitter(top)
        # edge midpoints on the columns of the corners: corner above and below, centre right and left
        side = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        m[:, half::step, ::step] = jitter(side)
        step //= 2
        w /= decay
    m -= m.min(axis=(1, 2), keepdims=True)
    result: np.ndarray = m / m.max(axis=(1, 2), keepdims=True)
    return result
