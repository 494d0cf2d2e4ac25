"""PGD (Madry et al., 2018): iterated steepest-ascent steps, each projected back onto the threat model.

Defaults follow torchattacks' ``PGD`` (eps 8/255 with alpha 2/255, i.e. a step of eps/4, 10 steps, random start).
Every sample keeps the first iterate that fools the model, at any step of any restart, and drops out of the batch
at once: later gradients are only computed for the samples still classified correctly, so batches shrink as the
attack succeeds. A sample never fooled gets its last iterate (of the last restart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from arbibench.attacks.base import (
    Attack,
    confirmed_misclassified,
    loss_gradient,
    predict,
    require_bool,
    require_choice,
    require_int,
    require_loss,
    require_positive_float,
)
from arbibench.attacks.losses import get_loss
from arbibench.attacks.threat import ThreatModel

STEP_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class PGDConfig:
    steps: int = 10
    rel_stepsize: float = 0.25  # step = rel_stepsize * eps: 2/255 at 8/255 (torchattacks' alpha)
    random_start: bool = True
    restarts: int = 1
    step_schedule: str = "constant"  # or "cosine": annealed from the full step towards 0
    loss: str = "ce"

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        require_positive_float("rel_stepsize", self.rel_stepsize)
        require_bool("random_start", self.random_start)
        require_int("restarts", self.restarts, 1)
        require_choice("step_schedule", self.step_schedule, STEP_SCHEDULES)
        require_loss("loss", self.loss)
        if self.restarts > 1 and not self.random_start:
            raise ValueError(
                f"restarts={self.restarts} needs random_start=True: restarting from the clean image repeats the "
                "same deterministic run"
            )

    def step_factor(self, k: int) -> float:
        """Fraction of the full step used at step ``k`` (0-based)."""
        if self.step_schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * k / self.steps))
        return 1.0


class PGD(Attack):
    """Projected gradient descent on the loss, with random restarts and per-sample early exit."""

    name = "pgd"
    needs_gradients = True
    Config = PGDConfig
    config: PGDConfig

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        cfg = self.config
        loss_fn = get_loss(cfg.loss)
        step = cfg.rel_stepsize * threat.eps
        x_adv = x.clone()
        if cfg.random_start:
            # A random start could move an already misclassified sample back; the clean point is its best result.
            fooled = predict(model, x) != y
        else:
            fooled = torch.zeros_like(y, dtype=torch.bool)  # the first step's forward pass checks the clean point

        for _ in range(cfg.restarts):
            idx = (~fooled).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            # Draw the start for the whole batch, then select, so a sample's start does not depend on the others.
            cur = threat.random_start(x, generator)[idx] if cfg.random_start else x[idx]
            x0, yi = x[idx], y[idx]
            for k in range(cfg.steps):
                grad, logits = loss_gradient(model, cur, yi, loss_fn)
                hit = confirmed_misclassified(model, cur, yi, logits)
                if hit.numel():
                    x_adv[idx[hit]] = cur[hit]
                    fooled[idx[hit]] = True
                    keep = torch.ones_like(yi, dtype=torch.bool)
                    keep[hit] = False
                    idx, cur, grad, x0, yi = idx[keep], cur[keep], grad[keep], x0[keep], yi[keep]
                    if idx.numel() == 0:
                        break
                alpha = max(step * cfg.step_factor(k), threat.min_step)
                cur = threat.project(cur + alpha * threat.step_direction(grad), x0)
            if idx.numel():
                x_adv[idx] = cur  # adversarial or not, the last iterate
                fooled[idx] = predict(model, cur) != yi
        return x_adv
