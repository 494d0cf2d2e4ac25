"""CW-Linf: PGD on the Carlini & Wagner margin loss, the "CW-inf" attack of robustness papers.

Not the optimisation attack of Carlini & Wagner (2017) itself but its margin loss, max_{i!=y} z_i - z_y, maximised by
PGD in the Linf ball (as in e.g. Zhang et al. 2019, TRADES, and many papers since). The loop is PGD's; only the
defaults differ. Steps and step size vary across papers (20 to 100 steps of 0.003 to 2/255 at eps 8/255); the
defaults here, 30 steps of eps/10 from a random start (0.8/255 at 8/255, a path of 3 eps), are arbibench's choice.

No loss temperature: the margin of logits / T is the margin divided by T, and the sign step of Linf PGD does not
see a positive factor on the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from arbibench.attacks.base import require_choice
from arbibench.attacks.pgd import PGD, PGDConfig
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class CWLinfConfig(PGDConfig):
    steps: int = 30  # arbibench's choice (see the module docstring)
    rel_stepsize: float = 0.1  # step = eps / 10: arbibench's choice
    loss: str = "margin"  # the CW margin: what makes it CW-Linf

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice("loss", self.loss, ("margin",))


class CWLinf(PGD):
    """PGD with the CW margin loss, random start and per-sample early exit, for the Linf threat model only."""

    name = "cw_linf"
    norms = ("Linf",)
    Config = CWLinfConfig
    config: CWLinfConfig

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        return super().run(model, x, y, threat, generator)
