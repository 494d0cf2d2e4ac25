"""FGSM (Goodfellow et al., 2015): one full-budget step along the loss gradient's steepest-ascent direction.

Under L2 the step is the normalised gradient (often called FGM). No random start: the classic single-step attack.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from arbibench.attacks.base import Attack, loss_gradient, require_loss
from arbibench.attacks.losses import get_loss
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class FGSMConfig:
    loss: str = "ce"  # cross-entropy, as in the paper

    def __post_init__(self) -> None:
        require_loss("loss", self.loss)


class FGSM(Attack):
    """x_adv = project(x + eps * step_direction(grad_x loss))."""

    name = "fgsm"
    needs_gradients = True
    Config = FGSMConfig
    config: FGSMConfig

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        grad, _ = loss_gradient(model, x, y, get_loss(self.config.loss))
        return threat.project(x + threat.eps * threat.step_direction(grad), x)
