"""CW-L2 (Carlini & Wagner, IEEE S&P 2017): the minimum-norm L2 attack by optimisation.

The image is written as x' = (tanh(w) + 1) / 2, so that every w gives pixels in [0, 1] (the paper's change of
variables), and Adam minimises, per sample,

    ||x' - x||_2^2 + c * max(z_y(x') - max_{i != y} z_i(x'), -kappa)

(the paper's best objective f_6, untargeted form: it is <= 0 exactly when some other logit beats the true one by
kappa). The constant c is chosen per sample by binary search: after each run of ``steps`` Adam iterations, c is
lowered (bisected towards the largest failing value) where the run found an adversarial example and raised (bisected,
or multiplied by 10 while no success is known) where it did not.

Defaults: Adam with learning rate 0.01 and kappa = 0 as in the paper; initial c = 0.01 and 5 binary-search steps
of 100 iterations each are arbibench's budget, far below the authors' reference code (9 steps of up to 10,000
iterations from c = 1e-3). torchattacks' ``CW`` instead runs 50 steps at a fixed c = 1 (kappa 0, lr 0.01)
without any binary search. A sample's run within one binary-search step stops early when its objective has
decreased by less than 0.01% over the last tenth of the iterations (early abort).

CW-L2 is an L2 attack only: a Linf threat model raises ValueError. Against a budget eps it returns, per sample, the
smallest adversarial example found (confirmed by the deployed model, a no-grad forward) if its L2 norm is at most
eps, and otherwise that example projected onto the eps-ball (the clean image if none was found), which the runner
checks like any other result. With ``exit_in_budget`` (default) a sample leaves the search at the first adversarial
example within eps, as in every arbibench attack; without it, the whole binary search runs and the smallest
adversarial example is kept. No randomness is drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from arbibench.attacks.base import Attack, predict, require_bool, require_int, require_positive_float
from arbibench.attacks.deepfool import budgeted
from arbibench.attacks.losses import margin
from arbibench.attacks.threat import ThreatModel

ADAM_BETAS = (0.9, 0.999)  # Adam's defaults (Kingma & Ba 2015), the optimiser the paper uses
ADAM_EPS = 1e-8
TANH_CLIP = 1.0 - 1e-6  # atanh of +-1 is infinite: pixels at 0 or 1 start a hair inside the box
ABORT_TOLERANCE = 1e-4  # early abort: the objective must fall by at least 0.01% per tenth of the iterations


@dataclass(frozen=True)
class CWL2Config:
    steps: int = 100  # Adam iterations per binary-search step (arbibench's budget; see the module docstring)
    binary_search_steps: int = 5  # arbibench's budget
    initial_const: float = 0.01  # c at the first binary-search step
    lr: float = 0.01  # Adam's learning rate (paper)
    confidence: float = 0.0  # kappa (paper: 0 for the minimum-distortion attack)
    early_abort: bool = True
    exit_in_budget: bool = True  # leave at the first adversarial example within eps (else: keep minimising)

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        require_int("binary_search_steps", self.binary_search_steps, 1)
        require_positive_float("initial_const", self.initial_const)
        require_positive_float("lr", self.lr)
        k = self.confidence
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
            raise ValueError(f"confidence must be a finite number >= 0, got {k!r}")
        require_bool("early_abort", self.early_abort)
        require_bool("exit_in_budget", self.exit_in_budget)


def _per_sample(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1)


class CWL2(Attack):
    """Carlini & Wagner's L2 attack with a per-sample binary search on c, for the L2 threat model only."""

    name = "cw_l2"
    norms = ("L2",)  # Carlini & Wagner's minimum L2 distortion search (for Linf: cw_linf, pgd, apgd)
    needs_gradients = True
    Config = CWL2Config
    config: CWL2Config

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,  # unused: CW-L2 is deterministic
    ) -> torch.Tensor:
        found, fooled = self.search(model, x, y, threat.eps if self.config.exit_in_budget else None)
        return budgeted(threat, found, fooled, x)

    def search(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, exit_radius: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample, the smallest adversarial example found (the clean image if none) and whether one was found.

        A sample leaves the search once it has one within L2 distance ``exit_radius`` (None: never, the whole
        binary search runs); a sample misclassified on arrival keeps the clean point.
        """
        cfg = self.config
        n, dev = x.shape[0], x.device
        best_l2 = torch.full((n,), math.inf, device=dev)
        best = x.clone()
        fooled = predict(model, x) != y
        best_l2[fooled] = 0.0
        lower = torch.zeros(n, dtype=torch.float64, device=dev)
        upper = torch.full((n,), math.inf, dtype=torch.float64, device=dev)
        const = torch.full((n,), float(cfg.initial_const), dtype=torch.float64, device=dev)
        w_start = torch.atanh((2.0 * x - 1.0).clamp(-TANH_CLIP, TANH_CLIP))
        done = fooled.clone()
        for _ in range(cfg.binary_search_steps):
            idx = (~done).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            success = self._optimise(model, x, y, idx, w_start, const, best, best_l2, exit_radius)
            fooled |= best_l2 < math.inf
            if exit_radius is not None:
                done |= best_l2 <= exit_radius
            # Binary search on c (paper): lower it where this run succeeded, raise it where it failed.
            c = const[idx]
            lo = torch.where(success, lower[idx], torch.maximum(lower[idx], c))
            up = torch.where(success, torch.minimum(upper[idx], c), upper[idx])
            const[idx] = torch.where(torch.isfinite(up), (lo + up) / 2, c * 10)
            lower[idx], upper[idx] = lo, up
        return best, fooled

    def _optimise(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        idx: torch.Tensor,
        w_start: torch.Tensor,
        const: torch.Tensor,
        best: torch.Tensor,
        best_l2: torch.Tensor,
        exit_radius: float | None,
    ) -> torch.Tensor:
        """One Adam run at fixed c for the samples ``idx``; updates ``best``/``best_l2`` in place.

        Returns, per sample of ``idx``, whether the run found an adversarial example (kappa-confident by the logits
        and misclassified by the deployed model).
        """
        cfg = self.config
        success = torch.zeros(idx.numel(), dtype=torch.bool, device=x.device)
        pos = torch.arange(idx.numel(), device=x.device)  # row of each still-optimised sample in ``success``
        x0, yi, c = x[idx], y[idx], const[idx].to(x.dtype)
        w = w_start[idx].clone()
        m, v = torch.zeros_like(w), torch.zeros_like(w)
        check_every = max(cfg.steps // 10, 1)
        prev = torch.full((idx.numel(),), math.inf, device=x.device)
        b1, b2 = ADAM_BETAS
        for k in range(cfg.steps):
            with torch.enable_grad():
                w_req = w.detach().requires_grad_(True)
                x_new = (torch.tanh(w_req) + 1.0) / 2.0
                logits = model(x_new)
                l2sq = _per_sample(x_new - x0).pow(2).sum(dim=1)
                gap = margin(logits, yi)  # max_{i != y} z_i - z_y
                objective = l2sq + c * (-gap).clamp_min(-cfg.confidence)
                (grad,) = torch.autograd.grad(objective.sum(), w_req)
            grad = torch.nan_to_num(grad.detach(), nan=0.0)
            objective, l2, gap, x_new = objective.detach(), l2sq.detach().sqrt(), gap.detach(), x_new.detach()

            # Record adversarial iterates (before the step: the objective was evaluated there).
            cand = ((gap >= cfg.confidence) & (gap > 0)).nonzero().squeeze(1)
            leave = torch.zeros_like(yi, dtype=torch.bool)
            if cand.numel():
                hit = cand[predict(model, x_new[cand]) != yi[cand]]
                success[pos[hit]] = True
                better = hit[l2[hit] < best_l2[idx[hit]]]
                best[idx[better]] = x_new[better]
                best_l2[idx[better]] = l2[better]
                if exit_radius is not None:
                    leave[hit[l2[hit] <= exit_radius]] = True

            if cfg.early_abort and (k + 1) % check_every == 0:
                leave |= objective > prev - ABORT_TOLERANCE * prev.abs()
                prev = objective
            if bool(leave.any()):
                keep = ~leave
                idx, pos, x0, yi, c, w, m, v, grad, prev = (t[keep] for t in (idx, pos, x0, yi, c, w, m, v, grad, prev))
                if idx.numel() == 0:
                    break

            # Adam (Kingma & Ba 2015) on w, per element.
            t = k + 1
            m = b1 * m + (1.0 - b1) * grad
            v = b2 * v + (1.0 - b2) * grad * grad
            step = cfg.lr * (m / (1.0 - b1**t)) / ((v / (1.0 - b2**t)).sqrt() + ADAM_EPS)
            w = w - step
        return success
