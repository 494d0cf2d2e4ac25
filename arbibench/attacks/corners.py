"""Random sign corners: uniform random vertices of the eps-ball, labels only; the cheapest probe of a sign network.

Why: the first binary layer of a BNN flips signs under perturbations far smaller than one grey level, and at such
radii the simulation's gradient (a surrogate through ``sign``) rarely points anywhere useful, while random corners
of the eps-ball fool many images. So the eps* search (:mod:`arbibench.evaluation.min_perturbation`) tries this probe
at every radius before any gradient attack, and an image it fools needs no gradient at that radius.

A draw is ``x + eps * d(s)`` for a uniform random sign vector ``s``, where ``d`` is the threat model's unit step
direction (``s`` itself in Linf, a vertex of the ball; ``s / ||s||`` in L2, a point on its sphere), projected onto
the ball and [0, 1] (pixels at 0 or 1 stay there). The first query is the clean image (an image misclassified on
arrival needs no draw); then one query per draw, and an image leaves at its first misclassified draw. Every example
is verified like any other before it counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbibench.attacks.base import DECISION_BASED, require_int
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class CornersConfig:
    draws: int = 50  # random corners per image

    def __post_init__(self) -> None:
        require_int("draws", self.draws, 1)

    @property
    def max_queries(self) -> int:
        """The query budget per image: the clean image, then one query per draw."""
        return self.draws + 1


class RandomCorners(BlackBoxAttack):
    """Uniform random sign corners of the eps-ball, labels only, with per-image early exit."""

    name = "corners"
    family = DECISION_BASED
    access = "labels"
    Config = CornersConfig
    config: CornersConfig

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        n, dev = x.shape[0], x.device
        fooled = (yield from oracle.query_adversarial(x, torch.arange(n))).cpu()
        x_adv = x.clone()
        for _ in range(self.config.draws):
            active = (~fooled).nonzero().flatten()
            if active.numel() == 0:
                break
            signs = torch.randint(0, 2, (len(active), *x.shape[1:]), generator=generator).to(x) * 2 - 1
            a = active.to(dev)
            cand = threat.project(x[a] + threat.eps * threat.step_direction(signs), x[a])
            hit = (yield from oracle.query_adversarial(cand, active)).cpu()
            x_adv[a[hit.to(dev)]] = cand[hit.to(dev)]
            fooled[active[hit]] = True
        return x_adv
