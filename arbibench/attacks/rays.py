"""RayS (Chen & Gu, KDD 2020): a decision-based Linf attack that searches over ray directions, not over images.

An adversarial example along a sign ray s in {-1, +1}^d is ``clip(x + r * s)``; the attack looks for the direction
whose boundary radius r(s) is smallest. Directions are changed by flipping the sign of one block of coordinates at
a time, hierarchically: the whole vector, then each half, each quarter, ... (blocks of the flattened C*H*W image,
in order), down to single coordinates, then again. A flip is tested with one query at the current best radius r*:
if the flipped ray is not adversarial there it cannot beat r* and is dropped; otherwise a binary search on [0, r*]
finds its radius, which becomes the new r*. Until a sample has an r*, each ray is walked outwards in ten steps of
0.1 (radius 1 reaches the corner of the image box) before its binary search.

The search is deterministic (the paper's): ``generator`` is not used. Binary searches stop when the interval is
below ``tol`` measured on a unit-L2 ray (1e-3 in the paper's code), i.e. ``tol / sqrt(d)`` in Linf radius.

Budget: ``max_queries`` per sample, default 1000 (the paper runs to 10k; raise it for headline numbers). A sample
stops as soon as a query is adversarial within eps (early exit) or its budget is spent; ``min_distance`` holds the
smallest adversarial Linf distance found (``inf`` where none was), and that point is returned when within eps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arbibench.attacks.base import DECISION_BASED, require_int, require_positive_float
from arbibench.attacks.hsja import DecisionLog
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel

LINE_STEPS = 10  # the first ray is tried at radius 0.1, 0.2, ..., 1.0 before its binary search


@dataclass(frozen=True)
class RaySConfig:
    max_queries: int = 1000  # per sample; the paper reports up to 10k (see module docstring)
    tol: float = 1e-3  # binary-search tolerance on a unit-L2 ray (Chen & Gu's code); tol / sqrt(d) in Linf radius

    def __post_init__(self) -> None:
        require_int("max_queries", self.max_queries, 1)
        require_positive_float("tol", self.tol)


class RayS(BlackBoxAttack):
    """RayS for the Linf threat model: labels only, hierarchical block sign flips, per-sample early exit."""

    name = "rays"
    family = DECISION_BASED
    norms = ("Linf",)  # a search over sign directions
    access = "labels"
    Config = RaySConfig
    config: RaySConfig

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        if threat.norm != "Linf":
            raise ValueError(f"rays is an Linf attack (it searches over sign directions); got the {threat.norm} model")
        n, dim = x.shape[0], x[0].numel()
        tol = self.config.tol / math.sqrt(dim)
        log = DecisionLog(oracle, threat)
        flat = x.reshape(n, -1)
        signs = torch.ones_like(flat)
        radius = torch.full((n,), math.inf, dtype=torch.float64)  # r* per sample
        level, block = 0, 0
        while True:
            idx = log.can_query().nonzero().flatten()
            if idx.numel() == 0:
                break
            size = math.ceil(dim / 2**level)
            start, end = block * size, min(dim, (block + 1) * size)
            trial = signs[idx.to(x.device)].clone()
            trial[:, start:end] *= -1
            better, r = yield from self._search(log, flat, idx, trial, radius[idx], tol)
            radius[idx[better]] = r[better]
            signs[idx[better].to(x.device)] = trial[better.to(x.device)]
            block += 1
            if block == 2**level or end == dim:
                level, block = level + 1, 0
        min_distance.append(log.best_dist.clone())
        return log.result()

    @staticmethod
    def _search(
        log: DecisionLog, flat: torch.Tensor, idx: torch.Tensor, trial: torch.Tensor, best: torch.Tensor, tol: float
    ) -> QuerySteps:
        """Radius of the boundary along each ``trial`` ray if it is below the sample's ``best``.

        Returns (improved mask, radius) over ``idx``. The returned radius is one at which the ray was queried and
        found adversarial, so the best point of every sample stays a real adversarial example.
        """
        dev = flat.device
        shape = (-1, *log.oracle.x0.shape[1:])

        def ray(sel: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
            sd = sel.to(dev)
            pts = flat[idx[sel].to(dev)] + r.to(device=dev, dtype=flat.dtype).view(-1, 1) * trial[sd]
            return pts.clamp(0.0, 1.0).view(shape)

        m = idx.numel()
        hi = best.clone()
        lo = torch.zeros(m, dtype=torch.float64)
        hit = torch.zeros(m, dtype=torch.bool)
        fresh = torch.isinf(best)
        # a known r*: one query tells whether the flipped ray can beat it
        sel = (~fresh).nonzero().flatten()
        if sel.numel():
            hit[sel] = yield from log.decide(ray(sel, best[sel]), idx[sel])
        # no r* yet: walk the ray outwards
        for k in range(1, LINE_STEPS + 1):
            sel = (fresh & ~hit & log.can_query()[idx]).nonzero().flatten()
            if sel.numel() == 0:
                break
            r = torch.full((sel.numel(),), k / LINE_STEPS, dtype=torch.float64)
            adv = yield from log.decide(ray(sel, r), idx[sel])
            hit[sel[adv]] = True
            hi[sel[adv]] = r[adv]
            lo[sel[adv]] = (k - 1) / LINE_STEPS
        while True:
            sel = (hit & (hi - lo > tol) & log.can_query()[idx]).nonzero().flatten()
            if sel.numel() == 0:
                break
            mid = (lo[sel] + hi[sel]) / 2
            adv = yield from log.decide(ray(sel, mid), idx[sel])
            hi[sel] = torch.where(adv, mid, hi[sel])
            lo[sel] = torch.where(adv, lo[sel], mid)
        return hit & (hi < best), hi
