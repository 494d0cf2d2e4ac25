"""Evaluation subsets: first-N (RobustBench's convention) or seeded random-N (the black-box subset)."""

from __future__ import annotations

import numpy as np


def select_indices(total: int, n_examples: int | None, *, seed: int | None = None) -> np.ndarray:
    """Dataset indices of the evaluated samples, sorted; deterministic for a given (total, n, seed)."""
    if n_examples is None:
        n_examples = total
    if isinstance(n_examples, bool) or not isinstance(n_examples, (int, np.integer)):
        raise TypeError(f"n_examples must be an int or None, got {n_examples!r}")
    if n_examples <= 0:
        raise ValueError(f"n_examples must be positive, got {n_examples}")
    if n_examples > total:
        raise ValueError(f"n_examples={n_examples} but the split holds only {total} samples; use n_examples<={total}.")
    if seed is None:
        return np.arange(n_examples, dtype=np.int64)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(total, size=n_examples, replace=False)).astype(np.int64)
