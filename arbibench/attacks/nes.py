"""NES (Ilyas et al., ICML 2018): PGD on a gradient estimated from scores by antithetic Gaussian sampling.

Why: it turns any white-box PGD intuition into a score-only attack, so it shows whether a model's robustness to
PGD comes from its gradients being uninformative (a BNN's sign activations) rather than from the decision function.

Per iteration and sample, ``samples / 2`` Gaussian directions ``u_i`` are drawn and the loss is queried at
``x + sigma u_i`` and ``x - sigma u_i`` (antithetic pairs halve the estimator's variance for the same queries);
``g = sum_i (L(x + sigma u_i) - L(x - sigma u_i)) u_i / (samples * sigma)`` estimates the loss gradient. Like the
paper's code, the estimate is smoothed with momentum, and the step is the threat model's steepest-ascent direction
(sign for Linf, normalised for L2) of size ``rel_stepsize * eps``, projected back onto the ball and [0, 1].
``sampling="rademacher"`` uses +-1 directions instead (the estimator of SPSA, Uesato et al. 2018).

Probe points are clipped to [0, 1] so that every query is an image. Each iteration costs ``samples`` queries for
the estimate and one to test the new iterate; a sample stops when that test says it is fooled, when one of its
probes is adversarial and within eps (that probe is returned), or when its budget can no longer pay for a whole
iteration. The paper's learning-rate decay on plateaus is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbibench.attacks.base import require_choice, require_int, require_loss, require_positive_float
from arbibench.attacks.losses import get_loss
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel

SAMPLINGS = ("gaussian", "rademacher")


@dataclass(frozen=True)
class NESConfig:
    max_queries: int = 10000  # the paper's untargeted budget
    samples: int = 50  # queries per gradient estimate (25 antithetic pairs), the paper's "samples per draw"
    sigma: float = 0.001  # search variance, the paper's value for images in [0, 1]
    rel_stepsize: float = 0.2  # step = 0.2 eps: the paper's learning rate 0.01 at eps 0.05
    momentum: float = 0.9  # the paper's code smooths the estimate: g = 0.9 g_prev + 0.1 g_new
    loss: str = "ce"  # ascended; "margin" (CW) does not saturate on confident logits
    sampling: str = "gaussian"  # or "rademacher" (SPSA's estimator)

    def __post_init__(self) -> None:
        require_int("max_queries", self.max_queries, 1)
        require_int("samples", self.samples, 2)
        if self.samples % 2:
            raise ValueError(f"samples must be even (antithetic pairs), got {self.samples}")
        require_positive_float("sigma", self.sigma)
        require_positive_float("rel_stepsize", self.rel_stepsize)
        m = self.momentum
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not (0.0 <= m < 1.0):
            raise ValueError(f"momentum must be in [0, 1), got {m!r}")
        require_loss("loss", self.loss)
        require_choice("sampling", self.sampling, SAMPLINGS)


class NES(BlackBoxAttack):
    """PGD on NES gradient estimates (antithetic sampling, momentum), per-sample early exit and budget."""

    name = "nes"
    access = "scores"
    Config = NESConfig
    config: NESConfig

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        cfg = self.config
        loss_fn = get_loss(cfg.loss)
        n = x.shape[0]
        dev = x.device
        half = cfg.samples // 2
        step = max(cfg.rel_stepsize * threat.eps, threat.min_step)
        x_cur = x.clone()
        grad = torch.zeros_like(x)
        fooled = ((yield from oracle.query_scores(x_cur, torch.arange(n))).argmax(dim=1) != y).cpu()
        while True:
            # A sample iterates only if it can pay for an estimate and the test of the step it leads to.
            active = (~fooled & (oracle.remaining() >= cfg.samples + 1)).nonzero().flatten()
            if active.numel() == 0:
                break
            a = active.to(dev)
            m = active.numel()
            shape = (m, half, *x.shape[1:])
            if cfg.sampling == "gaussian":
                u = torch.randn(shape, generator=generator)
            else:
                u = torch.randint(0, 2, shape, generator=generator).float() * 2.0 - 1.0
            u = u.to(x)
            centre = x_cur[a][:, None]
            probes = torch.cat([centre + cfg.sigma * u, centre - cfg.sigma * u], dim=1).clamp(0.0, 1.0)
            owners = active.repeat_interleave(cfg.samples)
            logits = yield from oracle.query_scores(probes.flatten(0, 1), owners)
            losses = loss_fn(logits, y[a].repeat_interleave(cfg.samples)).view(m, cfg.samples)
            # A probe that is already adversarial and inside the threat model ends its sample's attack (kept).
            probes = probes.flatten(0, 1)
            usable = (logits.argmax(dim=1) != y[a].repeat_interleave(cfg.samples)) & (
                threat.distance(probes, x[a].repeat_interleave(cfg.samples, dim=0)) <= threat.eps
            )
            usable = usable.view(m, cfg.samples)
            won = usable.any(dim=1)
            if bool(won.any()):
                first = usable.to(torch.int8).argmax(dim=1)  # the earliest usable probe of each sample
                rows = won.nonzero().flatten()
                x_cur[a[rows]] = probes.view(m, cfg.samples, *x.shape[1:])[rows, first[rows]]
                fooled[active[won.cpu()]] = True
                keep = ~won
                active, a, m, u, losses = active[keep.cpu()], a[keep], int(keep.sum()), u[keep], losses[keep]
                if m == 0:
                    continue
            diff = (losses[:, :half] - losses[:, half:]).to(x)
            estimate = (diff.view(m, half, *([1] * (x.dim() - 1))) * u).sum(dim=1) / (cfg.samples * cfg.sigma)
            grad[a] = cfg.momentum * grad[a] + (1.0 - cfg.momentum) * estimate
            x_cur[a] = threat.project(x_cur[a] + step * threat.step_direction(grad[a]), x[a])
            fooled[active] = ((yield from oracle.query_scores(x_cur[a], active)).argmax(dim=1) != y[a]).cpu()

        x_adv = x.clone()
        x_adv[fooled.to(dev)] = x_cur[fooled.to(dev)]
        return x_adv
