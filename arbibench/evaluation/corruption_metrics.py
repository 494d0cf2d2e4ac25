"""Corruption accuracy: per cell, per corruption, mean over cells (mCA) and its ratios, with 95% intervals.

A cell is one (corruption, severity). Its accuracy is a binomial proportion over independent images, so its
interval is Wilson's. Every mean over cells reuses the same images in all 75 cells, so its interval comes from a
seeded percentile bootstrap over *images* (resampling an image resamples all its cells), and so do the ratios
``mCA / clean accuracy`` (ACC_norm's reading for corruptions) and ``mCA / mCA of the FP twin`` (paired: both models
on the same images). Pure numpy, like :mod:`arbibench.evaluation.metrics`.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from arbibench.evaluation.bootstrap import N_BOOTSTRAP, Estimate, bootstrap_image_means, percentile_interval
from arbibench.evaluation.metrics import wilson_interval

__all__ = [
    "N_BOOTSTRAP", "CorruptionSummary", "Estimate", "cell_accuracy", "mean_corruption_accuracy", "relative_accuracy",
]


class CorruptionSummary(TypedDict):
    """What :func:`mean_corruption_accuracy` returns, each accuracy with its 95% interval."""

    cells: list[list[Estimate]]  # [corruption][severity]
    corruption: list[Estimate]  # per corruption, mean over its severities
    mca: Estimate  # mean over every cell
    clean: Estimate
    relative_clean: Estimate  # mCA / clean accuracy


def cell_accuracy(correct: np.ndarray) -> Estimate:
    """Accuracy of one cell (bool [n]) with its Wilson interval."""
    k, n = int(correct.sum()), int(correct.size)
    lo, hi = wilson_interval(k, n)
    return Estimate(k / n, lo, hi)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ratio: np.ndarray = np.divide(a, b, out=np.zeros_like(a, dtype=np.float64), where=b > 0)
    return ratio


def mean_corruption_accuracy(
    correct: np.ndarray, clean: np.ndarray, *, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> CorruptionSummary:
    """From ``correct`` (bool [corruptions, severities, n]) and ``clean`` (bool [n]) on the same images:
    ``cells`` (Estimate [C][S]), ``corruption`` (Estimate per corruption, mean over severities), ``mca``,
    ``clean`` and ``relative_clean`` (mCA / clean accuracy)."""
    c, s, n = correct.shape
    if clean.shape != (n,):
        raise ValueError(f"clean outcomes {clean.shape} do not match the {n} images of the corruption outcomes")
    per_image = correct.reshape(c, s, n).mean(axis=1).astype(np.float64)  # [C, n]: share of severities survived
    stats = np.concatenate([per_image, per_image.mean(0, keepdims=True), clean[None].astype(np.float64)])
    boot = bootstrap_image_means(stats, lambda m: m, n_boot, seed)  # [B, C + 2]
    point = stats.mean(-1)
    rel = _ratio(boot[:, c], boot[:, c + 1])
    return CorruptionSummary(
        cells=[[cell_accuracy(correct[i, j]) for j in range(s)] for i in range(c)],
        corruption=[percentile_interval(boot[:, i], point[i]) for i in range(c)],
        mca=percentile_interval(boot[:, c], point[c]),
        clean=cell_accuracy(clean),
        relative_clean=percentile_interval(rel, point[c] / point[c + 1] if point[c + 1] > 0 else 0.0),
    )


def relative_accuracy(
    correct: np.ndarray, reference: np.ndarray, *, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> Estimate:
    """mCA of ``correct`` over mCA of ``reference`` (both bool [C, S, n] on the same images), paired bootstrap."""
    if correct.shape != reference.shape:
        raise ValueError(f"outcomes of shape {correct.shape} and {reference.shape} are not on the same cells/images")
    n = correct.shape[-1]
    stats = np.stack([correct.reshape(-1, n).mean(0), reference.reshape(-1, n).mean(0)]).astype(np.float64)
    boot = bootstrap_image_means(stats, lambda m: m, n_boot, seed)
    point = stats.mean(-1)
    return percentile_interval(_ratio(boot[:, 0], boot[:, 1]), point[0] / point[1] if point[1] > 0 else 0.0)
