"""Minimal adversarial perturbation per image (eps*), and the robust-accuracy curve it implies.

At the headline eps every BNN of a CPU-trained zoo may end at 0% robust accuracy, so a ranking by robust accuracy
alone ranks noise. The smallest perturbation at which some attack fools each image still separates such models:
``eps*_i`` is the smallest distance of an adversarial example any attack of a chosen set found for image ``i``
(0 for an image misclassified clean, ``inf`` when none was found up to ``eps_max``). It is an *upper bound* on the
true minimal perturbation, like every attack-based number; robust accuracy at eps is then the fraction of images
with ``eps*_i > eps``, an upper bound on the true robust accuracy that never exceeds what any single attack shows.

How each attack contributes:

- attacks that report the perturbation they found (FAB, DeepFool, and the decision-based HopSkipJump and RayS,
  whose smallest adversarial distance is stored even beyond eps) run once at ``eps_max``; the stored distance of
  every fooled image is its bound;
- other gradient attacks (FGSM, PGD, APGD, ...) take a per-image binary search over eps on a dyadic grid of
  ``eps_max``: in round ``k`` each still-open image is attacked at the midpoint of its interval, images that share a
  midpoint are attacked together as one evaluation, and every evaluation goes through the result store, so a rerun
  (or a later call with more rounds) reads finished batches back. A fooled image's upper bound becomes the distance
  of the adversarial example found (at most the midpoint); a robust one's lower end moves up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.attacks import Attack, get_threat_model
from arbibench.evaluation.backends import Backend
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore
from arbibench.evaluation.surrogates import attack_for_target

# Attacks whose stored per-sample perturbation is the distance they found for every fooled image, so one run at
# eps_max gives each image's bound without a search.
DISTANCE_ATTACKS = frozenset({"fab", "fab_t", "deepfool", "hsja", "rays"})


def _binomial_half_cdf(n: int) -> np.ndarray:
    """P(B <= k) for B ~ Binomial(n, 1/2), k = 0..n, computed in log space (n may be in the thousands)."""
    k = np.arange(n + 1)
    log_pmf = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k]) - n * math.log(2)
    return np.cumsum(np.exp(log_pmf))


def median_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: the order statistics ``v_(l)`` and ``v_(n+1-l)``.

    ``l`` is the largest rank with ``P(B < l) <= (1 - confidence) / 2`` for ``B ~ Binomial(n, 1/2)``, so the
    interval covers the median with probability at least ``confidence`` whatever the distribution. It works with
    ``inf`` entries (images never fooled): the bounds are order statistics, so they may be ``inf`` too.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if n == 0:
        return (math.nan, math.nan)
    cdf = _binomial_half_cdf(n)
    alpha = 1.0 - confidence
    ranks = [rank for rank in range(1, (n + 1) // 2 + 1) if cdf[rank - 1] <= alpha / 2]
    rank = ranks[-1] if ranks else 1  # too few images for the confidence: the whole range
    return float(v[rank - 1]), float(v[n - rank])


@dataclass
class MinimalPerturbation:
    """Per-image eps* of one model under one norm, and what follows from it."""

    norm: str
    eps_max: float
    attacks: tuple[str, ...]
    sample_index: np.ndarray
    eps_star: np.ndarray  # per image; 0 where misclassified clean, inf where nothing was found up to eps_max
    search_rounds: int
    by_attack: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return float(np.median(self.eps_star)) if len(self.eps_star) else math.nan

    def median_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return median_interval(self.eps_star, confidence)

    def robust_accuracy(self, eps: float) -> float:
        """Fraction of images no attack fooled within ``eps`` (an upper bound on the true robust accuracy)."""
        return float((self.eps_star > eps).mean())

    def curve(self, n_points: int = 17) -> list[tuple[float, float]]:
        """Robust accuracy at ``n_points`` evenly spaced eps from 0 to ``eps_max``."""
        return [(float(e), self.robust_accuracy(float(e))) for e in np.linspace(0.0, self.eps_max, n_points)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (numbers as numbers; ``null`` for an infinite eps*)."""
        lo, hi = self.median_interval()

        def num(v: float) -> float | None:
            return None if math.isinf(v) or math.isnan(v) else v

        return {
            "norm": self.norm,
            "eps_max": self.eps_max,
            "attacks": list(self.attacks),
            "n_examples": int(len(self.eps_star)),
            "search_rounds": self.search_rounds,
            "median_eps_star": num(self.median),
            "median_eps_star_ci95": [num(lo), num(hi)],
            "not_fooled_up_to_eps_max": float(np.isinf(self.eps_star).mean()) if len(self.eps_star) else None,
            "curve": [{"eps": e, "robust_acc": a} for e, a in self.curve()],
            "per_sample": {
                "sample_index": self.sample_index.tolist(),
                "eps_star": [num(float(v)) for v in self.eps_star],
            },
        }


def _dyadic_midpoint(lo: float, hi: float, eps_max: float, rounds: int) -> float:
    """The grid point ``eps_max * j / 2**rounds`` nearest the middle of ``[lo, hi]``, so images can share one run.

    ``lo`` is 0 or a grid point, and the search only asks while ``hi - lo`` exceeds one grid unit, so the result lies
    strictly inside ``(lo, hi)``: every round makes progress.
    """
    unit: float = eps_max / 2**rounds
    return round((lo + hi) / 2 / unit) * unit


def minimal_perturbation(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] = ("apgd_ce",),
    threat_model: str = "Linf",
    eps_max: float = 16 / 255,
    search_rounds: int = 6,
    store: ResultStore,
    dataset: str = "custom",
    model_name: str = "model",
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    progress: bool = False,
    console: Console | None = None,
    backend: Backend | None = None,
    inference: str = "simulation",
) -> MinimalPerturbation:
    """eps* of every image under ``attacks`` (see the module docstring for how each attack contributes).

    ``search_rounds`` bisection rounds resolve eps* of the searched attacks to ``eps_max / 2**search_rounds``
    (plus the exact distance of the example found); more rounds cost one attack run per image each.
    """
    if isinstance(search_rounds, bool) or not isinstance(search_rounds, int) or not 1 <= search_rounds <= 12:
        raise ValueError(f"search_rounds must be an integer from 1 to 12, got {search_rounds!r}")
    get_threat_model(threat_model, eps_max)  # validates the norm and eps_max
    attack_objs = [attack_for_target(a, model_name) for a in attacks]
    if not attack_objs:
        raise ValueError("minimal_perturbation needs at least one attack")
    indices = torch.arange(len(y)) if indices is None else torch.as_tensor(indices, dtype=torch.int64).cpu()
    n = len(y)

    def run(attack: Attack, eps: float, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(clean correct, robust, distance found) of ``rows`` under ``attack`` at ``eps``, through the store."""
        pick = torch.from_numpy(rows)
        clean, outcomes, _, _ = evaluate(
            model, x[pick], y[pick], indices[pick], attacks=[attack], threat=get_threat_model(threat_model, eps),
            dataset=dataset, model_name=model_name, seed=seed, batch_size=batch_size, device=device, store=store,
            inference=inference,
            progress=progress, console=console, checks=False, backend=backend,
        )
        out = outcomes[attack.name]
        return clean.clean_correct, out.adv_correct, out.perturbation

    by_attack: dict[str, np.ndarray] = {}
    for attack in attack_objs:
        bound = np.full(n, math.inf)
        everything = np.arange(n)
        clean_ok, robust, dist = run(attack, eps_max, everything)
        bound[~clean_ok] = 0.0
        fooled = clean_ok & ~robust
        bound[fooled] = dist[fooled]
        # DISTANCE_ATTACKS: the distance stored for a fooled image is the one found; one run is all they need (an
        # adversarial a decision-based attack found beyond eps_max leaves the image robust up to eps_max: inf)
        if attack.name not in DISTANCE_ATTACKS:
            lo = np.zeros(n)
            hi = np.where(fooled, bound, math.inf)
            for _ in range(search_rounds):
                open_rows = np.nonzero(np.isfinite(hi) & (hi - lo > eps_max / 2**search_rounds))[0]
                if len(open_rows) == 0:
                    break
                mids = np.array([_dyadic_midpoint(lo[i], hi[i], eps_max, search_rounds) for i in open_rows])
                for mid in np.unique(mids):
                    rows = open_rows[mids == mid]
                    _, robust_m, dist_m = run(attack, float(mid), rows)
                    fooled_m = ~robust_m
                    hi[rows[fooled_m]] = np.minimum(hi[rows[fooled_m]], dist_m[fooled_m])
                    lo[rows[robust_m]] = np.maximum(lo[rows[robust_m]], mid)
            bound = np.where(clean_ok, hi, 0.0)
        by_attack[attack.name] = bound
    eps_star = np.min(np.stack(list(by_attack.values())), axis=0)
    return MinimalPerturbation(
        norm=get_threat_model(threat_model, eps_max).norm,
        eps_max=float(eps_max),
        attacks=tuple(a.name for a in attack_objs),
        sample_index=indices.numpy(),
        eps_star=eps_star,
        search_rounds=search_rounds,
        by_attack=by_attack,
    )
