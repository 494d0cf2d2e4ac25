"""MI-FGSM (Dong et al., CVPR 2018): iterative FGSM whose steps follow an accumulated, L1-normalised gradient.

g_{t+1} = mu * g_t + grad / ||grad||_1 (per sample), x_{t+1} = project(x_t + alpha * step_direction(g_{t+1})),
with the paper's defaults: T = 10 steps of alpha = eps / T, decay mu = 1.0, cross-entropy, no random start.
Under L2 the step direction is the L2-normalised momentum (the paper's L2 variant). A sample leaves the loop as
soon as the deployed model (no-grad forward) misclassifies an iterate, which becomes its result; a sample never
fooled gets the last iterate.
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
    require_int,
    require_loss,
    require_positive_float,
)
from arbibench.attacks.losses import get_loss
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class MIFGSMConfig:
    steps: int = 10  # T = 10 and step alpha = eps / T (Dong et al. 2018)
    decay: float = 1.0  # momentum decay mu = 1.0 (Dong et al. 2018); 0 gives plain I-FGSM of the same step
    loss: str = "ce"  # cross-entropy, as in the paper
    loss_temperature: float = 1.0  # the loss is taken on logits / T (1: the logits as they are)

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        if (
            isinstance(self.decay, bool)
            or not isinstance(self.decay, (int, float))
            or not math.isfinite(self.decay)
            or self.decay < 0
        ):
            raise ValueError(f"decay must be a finite number >= 0, got {self.decay!r}")
        require_loss("loss", self.loss)
        require_positive_float("loss_temperature", self.loss_temperature)


def l1_normalised(grad: torch.Tensor) -> torch.Tensor:
    """``grad`` divided by its per-sample L1 norm (a zero gradient stays zero).

    Divided by its largest entry first, so that subnormal or huge gradients neither lose precision nor overflow.
    """
    shape = (-1, *([1] * (grad.dim() - 1)))
    peak = grad.reshape(grad.shape[0], -1).abs().amax(dim=1).view(shape)
    scaled = torch.where(peak > 0, grad / torch.where(peak > 0, peak, torch.ones_like(peak)), torch.zeros_like(grad))
    norms = scaled.reshape(grad.shape[0], -1).abs().sum(dim=1).view(shape)  # >= 1 where the gradient is not 0
    return scaled / norms.clamp_min(1.0)


class MIFGSM(Attack):
    """Momentum iterative FGSM with per-sample early exit."""

    name = "mifgsm"
    needs_gradients = True
    Config = MIFGSMConfig
    config: MIFGSMConfig

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,  # unused: MI-FGSM starts from the clean image
    ) -> torch.Tensor:
        cfg = self.config
        loss_fn = get_loss(cfg.loss, cfg.loss_temperature)
        alpha = max(threat.eps / cfg.steps, threat.min_step)
        x_adv = x.clone()
        idx = torch.arange(x.shape[0], device=x.device)
        cur, x0, yi = x, x, y
        momentum = torch.zeros_like(x)
        for _ in range(cfg.steps):
            grad, logits = loss_gradient(model, cur, yi, loss_fn)
            hit = confirmed_misclassified(model, cur, yi, logits)
            if hit.numel():
                x_adv[idx[hit]] = cur[hit]
                keep = torch.ones_like(yi, dtype=torch.bool)
                keep[hit] = False
                idx, cur, grad, x0, yi, momentum = (t[keep] for t in (idx, cur, grad, x0, yi, momentum))
                if idx.numel() == 0:
                    return x_adv
            momentum = cfg.decay * momentum + l1_normalised(grad)
            cur = threat.project(cur + alpha * threat.step_direction(momentum), x0)
        x_adv[idx] = cur  # adversarial or not, the last iterate
        return x_adv
