"""ARBiBench robustness metrics: ACC, ACC*, ACC_norm, RS, worst case, Wilson intervals.

Definitions follow ARBiBench (Zhao et al., arXiv:2312.13575):

* ``ACC``      = fraction of the N evaluated samples classified correctly on clean input.
* ``ACC*``     = fraction of the *same* N samples still correct after an attack. A sample that is
  already wrong on clean input is never attacked and counts as not robust, so ``ACC* <= ACC``.
* ``ACC_norm`` = ``ACC* / ACC`` (0 when ``ACC == 0``): robustness relative to clean accuracy, so
  models with different clean accuracy can be compared.
* ``RS``       = ``sum_i ACC_norm^i`` over the attacks. This is the paper's *formula* (range
  ``[0, N_attacks]``). The paper's text calls RS a "mean", so ``RS_mean = RS / N_attacks``
  (range ``[0, 1]``) is reported too, under its own name, to keep both readings unambiguous.
* Worst case (RobustBench's ensemble robust accuracy): a sample is robust only if it survives
  every attack; ``worst_case_acc`` is the fraction of such samples.

All functions are pure numpy/python so the metrics can be recomputed from saved predictions
without torch.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "Z_95",
    "AttackMetrics",
    "RobustnessReport",
    "acc_norm",
    "compute_report",
    "robustness_score",
    "robustness_score_mean",
    "wilson_interval",
]

#: Two-sided 95% standard normal quantile, used verbatim so 95% intervals are reproducible.
Z_95 = 1.959963984540054


def _check_unit(name: str, value: float) -> float:
    """Reject NaN and values outside [0, 1]: a silent NaN would poison every aggregate."""
    value = float(value)
    if not (0.0 <= value <= 1.0):  # also False for NaN
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


def acc_norm(acc_star: float, acc: float) -> float:
    """Normalized adversarial accuracy ``ACC* / ACC``; 0 when ``ACC == 0``.

    ``ACC* > ACC`` is rejected: it can only happen when ACC* and ACC were measured on different
    sample sets (e.g. a 500-image black-box subset against a full-test-set ACC), which makes the
    ratio meaningless.
    """
    acc_star = _check_unit("acc_star", acc_star)
    acc = _check_unit("acc", acc)
    if acc_star > acc:
        raise ValueError(f"acc_star ({acc_star!r}) > acc ({acc!r}): both must be measured on the same samples")
    if acc == 0.0:
        return 0.0
    return acc_star / acc


def robustness_score(acc_norms: Sequence[float]) -> float:
    """ARBiBench Robustness Score: the *sum* of ACC_norm over attacks (paper's formula).

    Range ``[0, len(acc_norms)]``; an empty sequence gives 0.0.
    """
    return float(sum(_check_unit("acc_norm", v) for v in acc_norms))


def robustness_score_mean(acc_norms: Sequence[float]) -> float:
    """RS divided by the number of attacks (the paper's wording, "mean"); range ``[0, 1]``.

    Defined as 0.0 for zero attacks, so a report without attacks stays JSON-able (no NaN).
    """
    values = list(acc_norms)
    if not values:
        return 0.0
    return robustness_score(values) / len(values)


def _z_value(confidence: float) -> float:
    """Two-sided normal quantile for ``confidence``; exact constant for the common 95% case."""
    confidence = float(confidence)
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if confidence == 0.95:
        return Z_95
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Chosen over the normal (Wald) interval because it stays inside [0, 1] and keeps sensible
    coverage at the extremes (accuracy near 0 or 1) and for small subsets such as the
    500-image black-box evaluations.
    """
    successes = operator.index(successes)
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not (0 <= successes <= n):
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    z = _z_value(confidence)
    z2 = z * z
    p_hat = successes / n
    denom = 1.0 + z2 / n
    center = (p_hat + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(p_hat * (1.0 - p_hat) / n + z2 / (4.0 * n * n)) / denom
    # Exact endpoints at the boundaries (the formula gives them up to rounding only).
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return (low, high)


@dataclass(frozen=True)
class AttackMetrics:
    """Per-attack result: ``robust`` of ``n`` samples survived, giving ACC* and ACC_norm."""

    attack: str
    acc_star: float
    acc_norm: float
    n: int
    robust: int
    interval: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (numbers stay numbers, interval as ``[low, high]``)."""
        return {
            "attack": str(self.attack),
            "acc_star": float(self.acc_star),
            "acc_norm": float(self.acc_norm),
            "n": int(self.n),
            "robust": int(self.robust),
            "interval": [float(self.interval[0]), float(self.interval[1])],
        }


@dataclass(frozen=True)
class RobustnessReport:
    """Full ARBiBench summary for one model on one sample set.

    ``rs`` is the paper's formula (sum, range ``[0, n_attacks]``); ``rs_mean`` is ``rs / n_attacks``
    (range ``[0, 1]``, 0.0 when there are no attacks). With no attacks the worst case equals ACC.
    """

    n_examples: int
    acc: float
    acc_interval: tuple[float, float]
    attacks: tuple[AttackMetrics, ...]
    rs: float
    rs_mean: float
    worst_case_acc: float
    worst_case_acc_norm: float
    worst_case_interval: tuple[float, float]

    @property
    def n_attacks(self) -> int:
        """Number of attacks aggregated into RS."""
        return len(self.attacks)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: numbers as int/float (never strings), intervals as lists."""
        return {
            "n_examples": int(self.n_examples),
            "acc": float(self.acc),
            "acc_interval": [float(self.acc_interval[0]), float(self.acc_interval[1])],
            "attacks": [a.to_dict() for a in self.attacks],
            "n_attacks": self.n_attacks,
            "rs": float(self.rs),
            "rs_mean": float(self.rs_mean),
            "worst_case_acc": float(self.worst_case_acc),
            "worst_case_acc_norm": float(self.worst_case_acc_norm),
            "worst_case_interval": [float(self.worst_case_interval[0]), float(self.worst_case_interval[1])],
        }


def _as_bool_vector(name: str, values: Any) -> np.ndarray:
    """Coerce a 1-D bool-like array (bool, or numbers that are all 0/1) to a bool array."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "iuf":
        if not np.all((arr == 0) | (arr == 1)):
            raise ValueError(f"{name}: expected bool-like values (0/1 or True/False)")
        return arr.astype(bool)
    raise ValueError(f"{name}: expected a bool-like array, got dtype {arr.dtype}")


def compute_report(clean_correct: np.ndarray, adv_correct: Mapping[str, np.ndarray]) -> RobustnessReport:
    """Compute ACC, per-attack ACC*/ACC_norm, RS, RS_mean and the worst case from per-sample flags.

    ``clean_correct[i]`` says whether sample i is correct on clean input; ``adv_correct[name][i]``
    whether it is still correct after attack ``name``. Attack order is preserved. An adversarial
    "correct" on a clean-incorrect sample is rejected: the runner never attacks such samples and
    counts them as not robust, so it signals misaligned arrays.
    """
    clean = _as_bool_vector("clean_correct", clean_correct)
    n = int(clean.shape[0])
    if n == 0:
        raise ValueError("clean_correct is empty: need at least one sample")

    n_clean = int(clean.sum())
    acc = n_clean / n
    worst = clean.copy()
    per_attack: list[AttackMetrics] = []
    for name, values in adv_correct.items():
        if not isinstance(name, str):
            raise TypeError(f"attack names must be str, got {type(name).__name__}")
        adv = _as_bool_vector(f"attack {name!r}", values)
        if adv.shape[0] != n:
            raise ValueError(f"attack {name!r}: length {adv.shape[0]} does not match clean_correct length {n}")
        contradictions = np.flatnonzero(adv & ~clean)
        if contradictions.size:
            raise ValueError(
                f"attack {name!r}: {contradictions.size} sample(s) correct after attack but incorrect "
                f"on clean input (first index {int(contradictions[0])}); arrays are misaligned"
            )
        robust = int(adv.sum())
        acc_star = robust / n
        per_attack.append(
            AttackMetrics(
                attack=name,
                acc_star=acc_star,
                acc_norm=acc_norm(acc_star, acc),
                n=n,
                robust=robust,
                interval=wilson_interval(robust, n),
            )
        )
        worst &= adv

    norms = [a.acc_norm for a in per_attack]
    n_worst = int(worst.sum())
    worst_acc = n_worst / n
    return RobustnessReport(
        n_examples=n,
        acc=acc,
        acc_interval=wilson_interval(n_clean, n),
        attacks=tuple(per_attack),
        rs=robustness_score(norms),
        rs_mean=robustness_score_mean(norms),
        worst_case_acc=worst_acc,
        worst_case_acc_norm=acc_norm(worst_acc, acc),
        worst_case_interval=wilson_interval(n_worst, n),
    )
