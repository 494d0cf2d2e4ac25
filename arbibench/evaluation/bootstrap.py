"""Seeded percentile bootstrap over images: the intervals of every statistic that reuses the same images.

A statistic computed from several outcome vectors on the same images (a mean over corruption cells, a mean ACC_norm
over attacks, a BNN against its FP twin) is not a single binomial proportion, so its 95% interval comes from
resampling *images*: each resample draws n image positions with replacement and keeps all of an image's outcomes
together, which also pairs two models evaluated on the same images. Pure numpy; the seed makes every interval
reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

N_BOOTSTRAP = 2000
_CHUNK = 100


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval."""

    value: float
    low: float
    high: float

    def to_list(self) -> list[float]:
        return [self.value, self.low, self.high]


def bootstrap_image_means(
    stats: np.ndarray, fn: Callable[[np.ndarray], np.ndarray], n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> np.ndarray:
    """``fn`` of the image means of ``stats`` [K, n] (given as [b, K]) over ``n_boot`` resamples of the n images."""
    rng = np.random.default_rng(seed)
    n = stats.shape[-1]
    out = []
    for start in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - start), n))
        out.append(fn(stats[:, idx].mean(-1).T))  # [b, K] -> [b, ...]
    return np.concatenate(out)


def percentile_interval(samples: np.ndarray, value: float) -> Estimate:
    """``value`` with the 2.5th and 97.5th percentiles of its bootstrap ``samples``."""
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return Estimate(float(value), float(lo), float(hi))
