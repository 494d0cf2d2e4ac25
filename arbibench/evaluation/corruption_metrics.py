"""Corruption accuracy: per cell, per corruption, mean over cells (mCA) and its ratios, with 95% intervals.

A cell is one (corruption, severity). Its accuracy is a binomial proportion over independent images, so its
interval is Wilson's. Every mean over cells reuses the same images in all 75 cells, so its interval comes from a
seeded percentile bootstrap over *images* (resampling an image resamples all its cells), and so do the ratios
``mCA / clean accuracy`` (ACC_norm's reading for corruptions) and ``mCA / mCA of the FP twin`` (paired: both models
on the same images). Pure numpy, like :mod:`arbibench.evaluation.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arbibench.evaluation.metrics import wilson_interval

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


def _bootstrap_stats(stats: np.ndarray, fn, n_boot: int, seed: int) -> np.ndarray:  # noqa: ANN001 - numpy fn
    """``fn`` of the image-mean of ``stats`` [K, n] over ``n_boot`` resamples of the n images: [n_boot, ...]."""
    rng = np.random.default_rng(seed)
    n = stats.shape[-1]
    out = []
    for start in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - start), n))
        out.append(fn(stats[:, idx].mean(-1).T))  # [b, K]
    return np.concatenate(out)


def _interval(samples: np.ndarray, value: float) -> Estimate:
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return Estimate(float(value), float(lo), float(hi))


def cell_accuracy(correct: np.ndarray) -> Estimate:
    """Accuracy of one cell (bool [n]) with its Wilson interval."""
    k, n = int(correct.sum()), int(correct.size)
    lo, hi = wilson_interval(k, n)
    return Estimate(k / n, lo, hi)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros_like(a, dtype=np.float64), where=b > 0)


def mean_corruption_accuracy(
    correct: np.ndarray, clean: np.ndarray, *, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> dict[str, object]:
    """From ``correct`` (bool [corruptions, severities, n]) and ``clean`` (bool [n]) on the same images:
    ``cells`` (Estimate [C][S]), ``corruption`` (Estimate per corruption, mean over severities), ``mca``,
    ``clean`` and ``relative_clean`` (mCA / clean accuracy)."""
    c, s, n = correct.shape
    if clean.shape != (n,):
        raise ValueError(f"clean outcomes {clean.shape} do not match the {n} images of the corruption outcomes")
    per_image = correct.reshape(c, s, n).mean(axis=1).astype(np.float64)  # [C, n]: share of severities survived
    stats = np.concatenate([per_image, per_image.mean(0, keepdims=True), clean[None].astype(np.float64)])
    boot = _bootstrap_stats(stats, lambda m: m, n_boot, seed)  # [B, C + 2]
    point = stats.mean(-1)
    rel = _ratio(boot[:, c], boot[:, c + 1])
    return {
        "cells": [[cell_accuracy(correct[i, j]) for j in range(s)] for i in range(c)],
        "corruption": [_interval(boot[:, i], point[i]) for i in range(c)],
        "mca": _interval(boot[:, c], point[c]),
        "clean": cell_accuracy(clean),
        "relative_clean": _interval(rel, point[c] / point[c + 1] if point[c + 1] > 0 else 0.0),
    }


def relative_accuracy(
    correct: np.ndarray, reference: np.ndarray, *, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> Estimate:
    """mCA of ``correct`` over mCA of ``reference`` (both bool [C, S, n] on the same images), paired bootstrap."""
    if correct.shape != reference.shape:
        raise ValueError(f"outcomes of shape {correct.shape} and {reference.shape} are not on the same cells/images")
    n = correct.shape[-1]
    stats = np.stack([correct.reshape(-1, n).mean(0), reference.reshape(-1, n).mean(0)]).astype(np.float64)
    boot = _bootstrap_stats(stats, lambda m: m, n_boot, seed)
    point = stats.mean(-1)
    return _interval(_ratio(boot[:, 0], boot[:, 1]), point[0] / point[1] if point[1] > 0 else 0.0)
