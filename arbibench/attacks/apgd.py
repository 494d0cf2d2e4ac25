"""APGD (Croce & Hein, ICML 2020): step-size-free PGD with momentum, the gradient attacks of AutoAttack.

The step size starts at 2 eps and is halved at checkpoints when the search stalls, restarting from the best point
found so far; a momentum of 0.75 smooths the iterates. Three registered variants:

- ``apgd_ce``: untargeted, cross-entropy loss (AutoAttack's APGD-CE);
- ``apgd_dlr``: untargeted, DLR loss (APGD-DLR, used in AutoAttack's "rand" version);
- ``apgd_t``: targeted DLR loss against each of the 9 most likely other classes in turn (AutoAttack's APGD-T).

Defaults are those of the paper and of the AutoAttack reference code (100 steps, rho = 0.75, one restart per run,
9 target classes). Where the paper and the code differ in a detail, the paper is followed and the difference is
named where it happens. As everywhere in arbibench, a sample leaves the search as soon as the deployed model
(a no-grad forward) misclassifies one of its iterates, which is kept as its result; a sample never fooled gets the
point with the highest loss over all its runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any, ClassVar

import torch
from torch import nn

from arbibench.attacks.base import (
    Attack,
    confirmed_misclassified,
    loss_gradient,
    most_likely_other_classes,
    predict,
    require_int,
    require_loss,
    require_positive_float,
)
from arbibench.attacks.losses import LOSSES, LossFn, targeted_dlr, with_temperature
from arbibench.attacks.threat import ThreatModel

INITIAL_REL_STEP = 2.0  # eta^(0) = 2 eps (paper, Sec. 3.1; reference code: alpha = 2 for Linf and L2)
MOMENTUM = 0.75  # alpha in x^(k+1) = P(x^(k) + alpha (z^(k+1) - x^(k)) + (1 - alpha)(x^(k) - x^(k-1))) (paper)

_P1 = Fraction(22, 100)  # first checkpoint at 22% of the steps
_P_DECREASE = Fraction(3, 100)  # each checkpoint interval is 3% shorter than the previous ...
_P_MIN_INTERVAL = Fraction(6, 100)  # ... but at least 6% of the steps


def apgd_checkpoints(steps: int) -> list[int]:
    """The iterations w_j = ceil(p_j * steps) at which APGD may halve its step (p_j <= 1; w_0 = 0 is the start).

    p_0 = 0, p_1 = 0.22, p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06) (paper, Sec. 3.1); for 100 steps:
    0, 22, 41, 57, 70, 80, 87, 93, 99. Computed with exact fractions, so that 0.22 * 100 is 22 and not 23.
    Repeated values (few steps) are merged.
    """
    require_int("steps", steps, 1)
    points = [0]
    p_prev, p = Fraction(0), _P1
    while p <= 1:
        w = math.ceil(p * steps)
        if w > points[-1]:
            points.append(w)
        p_prev, p = p, p + max(p - p_prev - _P_DECREASE, _P_MIN_INTERVAL)
    return points


def apgd_should_halve(
    n_up: torch.Tensor,
    interval: int,
    rho: float,
    halved_at_check: torch.Tensor,
    loss_best: torch.Tensor,
    loss_best_at_check: torch.Tensor,
) -> torch.Tensor:
    """Per sample, whether APGD halves its step at a checkpoint ``interval`` steps after the previous one.

    Condition 1: fewer than ``rho * interval`` of those steps increased the loss (``n_up`` counts them; the
    paper's strict "<", where the reference code uses "<="). Condition 2: the step was not halved at the previous
    checkpoint (``halved_at_check`` False) and the best loss has not improved since (``loss_best`` equal to
    ``loss_best_at_check``).
    """
    condition1 = n_up.double() < rho * interval
    condition2 = ~halved_at_check & (loss_best <= loss_best_at_check)
    return condition1 | condition2


def require_rho(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < value <= 1.0):
        raise ValueError(f"rho must be a number in (0, 1], got {value!r}")


@dataclass(frozen=True)
class APGDConfig:
    """APGD-CE: the defaults of Croce & Hein (2020) and of AutoAttack's standard version."""

    steps: int = 100  # iterations per run (paper and AutoAttack)
    restarts: int = 1  # random restarts (AutoAttack's standard version: 1)
    loss: str = "ce"  # "ce": APGD-CE; "dlr": APGD-DLR; any name in LOSSES
    rho: float = 0.75  # condition 1: halve the step when fewer than rho of the steps since the checkpoint helped
    eot_iter: int = 1  # gradients averaged per step (Expectation over Transformation); > 1 only for random models
    loss_temperature: float = 1.0  # the loss is taken on logits / T (1: the logits as they are)

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        require_int("restarts", self.restarts, 1)
        require_loss("loss", self.loss)
        require_rho(self.rho)
        require_int("eot_iter", self.eot_iter, 1)
        require_positive_float("loss_temperature", self.loss_temperature)


@dataclass(frozen=True)
class APGDDLRConfig(APGDConfig):
    """APGD-DLR: APGD-CE's defaults with the DLR loss (Croce & Hein 2020)."""

    loss: str = "dlr"


@dataclass(frozen=True)
class APGDTConfig:
    """APGD-T: targeted DLR loss against the most likely other classes (AutoAttack's standard version)."""

    steps: int = 100  # iterations per run (AutoAttack)
    restarts: int = 1  # runs per target class (AutoAttack's standard version: 1)
    n_target_classes: int = 9  # targets: the 9 classes with the highest clean logits after the true one (AutoAttack)
    rho: float = 0.75
    eot_iter: int = 1  # see APGDConfig
    loss_temperature: float = 1.0  # DLR is scale invariant: only the 1e-12 in its denominator sees T

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        require_int("restarts", self.restarts, 1)
        require_int("n_target_classes", self.n_target_classes, 1)
        require_rho(self.rho)
        require_int("eot_iter", self.eot_iter, 1)
        require_positive_float("loss_temperature", self.loss_temperature)


def _per_sample_view(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


def _bind_target(loss: Callable[..., torch.Tensor], target: torch.Tensor | None) -> LossFn:
    """A (logits, y) loss: ``loss`` itself, or the targeted loss with this batch's targets filled in."""
    if target is None:
        return loss

    def bound(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss(logits, y, target)

    return bound



@dataclass
class _SearchState:
    """The samples one APGD run still searches, every tensor indexed alike (row i is sample ``idx[i]`` of the run)."""

    idx: torch.Tensor
    x0: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor | None
    cur: torch.Tensor  # x^(k)
    prev: torch.Tensor  # x^(k-1)
    grad: torch.Tensor
    loss: torch.Tensor  # f(x^(k))
    x_best: torch.Tensor
    loss_best: torch.Tensor
    grad_best: torch.Tensor
    eta: torch.Tensor  # per-sample step size
    n_up: torch.Tensor  # steps since the last checkpoint that raised f
    loss_best_at_check: torch.Tensor  # f_max at the last checkpoint
    halved_at_check: torch.Tensor  # whether eta was halved at the last checkpoint

    def select(self, keep: torch.Tensor) -> _SearchState:
        """The state of the samples where ``keep`` is true."""
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            picked[f.name] = None if value is None else value[keep]
        return _SearchState(**picked)

class APGD(Attack):
    """APGD with the loss named in the config (cross-entropy by default: APGD-CE)."""

    name = "apgd_ce"
    needs_gradients = True
    Config: ClassVar[type] = APGDConfig  # typed as on Attack: APGD-T's config is a sibling, not a subclass
    config: APGDConfig

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        cfg = self.config
        loss = with_temperature(LOSSES[cfg.loss], cfg.loss_temperature)
        runs: list[torch.Tensor | None] = [None] * cfg.restarts
        return self._attack(model, x, y, threat, generator, loss, runs, predict(model, x) != y)

    # -- shared by every variant -----------------------------------------------------------------------------------
    def _attack(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        loss: Callable[..., torch.Tensor],
        runs: list[torch.Tensor | None],
        fooled: torch.Tensor,
    ) -> torch.Tensor:
        """One APGD run per entry of ``runs`` (None: untargeted; else targets for the whole batch), each only on
        the samples not yet fooled and from its own random start. Samples fooled on arrival keep the clean point.
        """
        x_adv = x.clone()
        fooled = fooled.clone()
        best_loss = torch.full(y.shape, -math.inf, device=x.device)
        for target in runs:
            idx = (~fooled).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            # Draw the start for the whole batch, then select, so a sample's start does not depend on the others.
            start = threat.random_start(x, generator)[idx]
            tgt = None if target is None else target[idx]
            found, hit, x_best, loss_best = self._search(model, x[idx], y[idx], tgt, start, loss, threat)
            x_adv[idx[hit]] = found[hit]
            fooled[idx[hit]] = True
            better = ~hit & (loss_best > best_loss[idx])
            x_adv[idx[better]] = x_best[better]
            best_loss[idx[better]] = loss_best[better]
        return x_adv

    def _evaluate(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample loss, its input gradient (both averaged over eot_iter passes) and the last pass's logits."""
        eot = self.config.eot_iter
        grad_sum, loss_sum, logits = None, None, None
        for _ in range(eot):
            grad, logits = loss_gradient(model, x, y, loss_fn)
            value = loss_fn(logits, y)
            grad_sum = grad if grad_sum is None else grad_sum + grad
            loss_sum = value if loss_sum is None else loss_sum + value
        assert grad_sum is not None and loss_sum is not None and logits is not None
        return loss_sum / eot, grad_sum / eot, logits

    def _search(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        y: torch.Tensor,
        target: torch.Tensor | None,
        start: torch.Tensor,
        loss: Callable[..., torch.Tensor],
        threat: ThreatModel,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One APGD run (Algorithm 1 of the paper) from ``start``.

        Returns, per sample: the first iterate the deployed model misclassifies (where ``fooled``), ``fooled``,
        the iterate with the highest loss and that loss (meaningful where not fooled).
        """
        cfg = self.config
        n = x0.shape[0]
        found = x0.clone()
        fooled = torch.zeros(n, dtype=torch.bool, device=x0.device)
        out_best = start.clone()
        out_loss = torch.full((n,), -math.inf, device=x0.device)
        checkpoints = apgd_checkpoints(cfg.steps)
        next_check = 1  # index into checkpoints of the next one to reach

        value, grad, logits = self._evaluate(model, start, y, _bind_target(loss, target))
        s = _SearchState(
            idx=torch.arange(n, device=x0.device),
            x0=x0,
            y=y,
            target=target,
            cur=start,
            prev=start,  # the momentum term is 0 at the first step anyway
            grad=grad,
            loss=value,
            x_best=start.clone(),
            loss_best=value.clone(),
            grad_best=grad.clone(),
            eta=torch.full((n,), INITIAL_REL_STEP * threat.eps, device=x0.device, dtype=x0.dtype),
            n_up=torch.zeros(n, dtype=torch.int64, device=x0.device),
            loss_best_at_check=value.clone(),
            halved_at_check=torch.zeros(n, dtype=torch.bool, device=x0.device),
        )

        def drop_fooled(state: _SearchState, logits: torch.Tensor) -> _SearchState:
            hit = confirmed_misclassified(model, state.cur, state.y, logits)
            if hit.numel() == 0:
                return state
            found[state.idx[hit]] = state.cur[hit]
            fooled[state.idx[hit]] = True
            keep = torch.ones(state.y.shape, dtype=torch.bool, device=x0.device)
            keep[hit] = False
            return state.select(keep)

        s = drop_fooled(s, logits)  # the random start itself may already fool the model
        for k in range(cfg.steps):
            if s.idx.numel() == 0:
                break
            cur, x0s = s.cur, s.x0
            eta = _per_sample_view(s.eta.clamp_min(threat.min_step), cur)
            z = threat.project(cur + eta * threat.step_direction(s.grad), x0s)
            a = 1.0 if k == 0 else MOMENTUM
            new = threat.project(cur + a * (z - cur) + (1.0 - a) * (cur - s.prev), x0s)
            value, grad, logits = self._evaluate(model, new, s.y, _bind_target(loss, s.target))
            s.n_up = s.n_up + (value > s.loss).long()
            s.prev, s.cur, s.grad, s.loss = cur, new, grad, value
            improved = value > s.loss_best
            s.x_best = torch.where(_per_sample_view(improved, new), new, s.x_best)
            s.grad_best = torch.where(_per_sample_view(improved, new), grad, s.grad_best)
            s.loss_best = torch.where(improved, value, s.loss_best)
            s = drop_fooled(s, logits)

            if next_check < len(checkpoints) and k + 1 == checkpoints[next_check]:
                interval = checkpoints[next_check] - checkpoints[next_check - 1]
                next_check += 1
                if s.idx.numel() == 0:
                    break
                stalled = apgd_should_halve(
                    s.n_up, interval, cfg.rho, s.halved_at_check, s.loss_best, s.loss_best_at_check
                )
                back = _per_sample_view(stalled, s.cur)
                # Halve the step and go back to the best point (with its gradient); x^(k-1) stays, as in the paper.
                s.eta = torch.where(stalled, s.eta / 2, s.eta)
                s.cur = torch.where(back, s.x_best, s.cur)
                s.grad = torch.where(back, s.grad_best, s.grad)
                s.loss = torch.where(stalled, s.loss_best, s.loss)
                s.halved_at_check = stalled
                s.loss_best_at_check = s.loss_best.clone()
                s.n_up = torch.zeros_like(s.n_up)

        out_best[s.idx] = s.x_best
        out_loss[s.idx] = s.loss_best
        return found, fooled, out_best, out_loss


class APGDDLR(APGD):
    """APGD on the DLR loss (Croce & Hein 2020): robust to the scale of the logits."""

    name = "apgd_dlr"
    Config: ClassVar[type] = APGDDLRConfig
    config: APGDDLRConfig


class APGDT(APGD):
    """APGD-T: targeted DLR against each of the ``n_target_classes`` most likely other classes in turn.

    Targets are ranked by the clean logits; each target class gets ``restarts`` runs of ``steps`` steps, on the
    samples no earlier run has fooled (AutoAttack's loop). With fewer classes than ``n_target_classes + 1`` every
    other class is a target once. Success means any wrong label, not necessarily the target's.
    """

    name = "apgd_t"
    Config: ClassVar[type] = APGDTConfig
    config: APGDTConfig  # type: ignore[assignment]  # the shared step loop reads only fields both configs have

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        cfg = self.config
        with torch.no_grad():
            clean = model(x)
        if clean.dim() != 2 or clean.shape[1] < 4:
            raise ValueError(f"apgd_t needs logits [N, K] with K >= 4 classes (targeted DLR), got {tuple(clean.shape)}")
        targets = most_likely_other_classes(clean, y, cfg.n_target_classes)
        runs: list[torch.Tensor | None] = [t for t in targets.T for _ in range(cfg.restarts)]
        loss = with_temperature(targeted_dlr, cfg.loss_temperature)
        return self._attack(model, x, y, threat, generator, loss, runs, clean.argmax(dim=1) != y)
