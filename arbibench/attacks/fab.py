"""FAB (Croce & Hein, ICML 2020): the fast adaptive boundary attack, a minimum-norm attack for Linf and L2.

Each step linearises the classifier at the current iterate ``x_k`` for the difference of two logits
``f = z_s - z_y`` (``s`` the target class, or for the untargeted version the class whose linearised decision
boundary is closest), and projects both ``x_k`` and the original point ``x_0`` onto that linearised hyperplane
intersected with the image box [0, 1] (:func:`project_hyperplane_box`, the paper's box-constrained projection).
The next iterate is the convex combination

    x_{k+1} = clip_[0,1]((1 - alpha)(x_k + eta d_k) + alpha (x_0 + eta d_0)),
    alpha = min(||d_k|| / (||d_k|| + ||d_0||), alpha_max),

so the step is biased towards the original point, ``eta`` > 1 slightly overshoots the hyperplane, and every
iterate the deployed model misclassifies is recorded (the smallest one per sample is the result) and pulled back
towards the original, ``x_{k+1} <- (1 - beta) x_0 + beta x_{k+1}``.

Two registered variants, with AutoAttack's settings as defaults:

- ``fab``: untargeted (closest boundary by linear approximation; needs the gradient of every logit per step);
- ``fab_t``: targeted at each of the 9 most likely other classes in turn (AutoAttack's FAB-T: one gradient per step).

Minimum norm within a threat model: a run's result is the smallest adversarial point found; samples fooled within
``eps`` leave the attack (AutoAttack's loop: later targets and restarts only see the rest) and are returned as they
are. A sample whose smallest adversarial point is farther than ``eps`` (or that was never fooled) gets that point
projected onto the threat model (or the clean point), so every result passes verification and only successes
within ``eps`` count. Restarts after the first start at random, at a distance of half ``min(eps, best norm)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks.base import (
    Attack,
    AttackOutput,
    most_likely_other_classes,
    predict,
    require_int,
    require_positive_float,
)
from arbibench.attacks.threat import ThreatModel, _check_generator

FAB_NORMS = ("Linf", "L2")
_DIV_GUARD = 1e-12  # keeps the boundary-distance ratio finite for zero gradients (reference code's constant)


def _require_unit_interval(name: str, value: object, *, closed_right: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and 0.0 <= value and (value <= 1.0 if closed_right else value < 1.0)  # type: ignore[operator]
    if not ok:
        bracket = "]" if closed_right else ")"
        raise ValueError(f"{name} must be a number in [0, 1{bracket}, got {value!r}")


def _require_eta(value: object) -> None:
    require_positive_float("eta", value)
    if value < 1.0:  # type: ignore[operator]
        raise ValueError(f"eta must be >= 1 (it extrapolates beyond the linearised boundary), got {value!r}")


@dataclass(frozen=True)
class FABConfig:
    """Untargeted FAB: the defaults of Croce & Hein (2020) and AutoAttack's reference code."""

    steps: int = 100  # iterations per run (AutoAttack)
    restarts: int = 1  # runs; all but the first start at random (AutoAttack standard: 1; "plus": 5)
    alpha_max: float = 0.1  # the largest weight of the step taken from the original point (paper and AutoAttack)
    eta: float = 1.05  # extrapolation beyond the linearised boundary (paper and AutoAttack)
    beta: float = 0.9  # backward step towards the original after a success (paper and AutoAttack)

    def __post_init__(self) -> None:
        require_int("steps", self.steps, 1)
        require_int("restarts", self.restarts, 1)
        _require_unit_interval("alpha_max", self.alpha_max, closed_right=False)
        _require_eta(self.eta)
        _require_unit_interval("beta", self.beta, closed_right=True)
        if self.beta == 0:
            raise ValueError("beta must be > 0 (beta = 0 throws every adversarial iterate back to the original)")


@dataclass(frozen=True)
class FABTConfig(FABConfig):
    """FAB-T: AutoAttack's standard version (9 target classes, 100 steps, 1 run per target)."""

    n_target_classes: int = 9  # the most likely other classes by clean logits, each attacked in turn (AutoAttack)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("n_target_classes", self.n_target_classes, 1)


# -- geometry: the projection onto a hyperplane intersected with the box ----------------------------------------------
def project_hyperplane_box(p: torch.Tensor, w: torch.Tensor, r: torch.Tensor, norm: str) -> torch.Tensor:
    """Per sample, the smallest ``d`` (in ``norm``) with ``<w, d> = r`` and ``p + d`` in [0, 1].

    ``p`` and ``w`` are [N, D], ``r`` is [N]; ``p`` must lie in [0, 1]. Exact, by sorting: with the sign of ``r``
    folded into ``w`` (so ``r >= 0``), the optimum is ``d_i = sign(w_i) min(t, b_i)`` (Linf) or
    ``d_i = sign(w_i) min(t |w_i|, b_i)`` (L2, the KKT form ``clip(t w, box)``), where ``b_i`` is the room pixel
    ``i`` has in the direction that raises ``<w, d>``. ``<w, d(t)>`` is nondecreasing and piecewise linear in ``t``
    with breakpoints where pixels saturate; sorting them gives the segment that reaches ``r`` and ``t`` in closed
    form. If the box cannot reach the hyperplane, the box corner closest to it (``t`` = infinity) is returned.
    Computed in float64, returned in ``p``'s dtype.
    """
    if norm not in FAB_NORMS:
        raise ValueError(f"norm must be one of {FAB_NORMS}, got {norm!r}")
    dtype = p.dtype
    p, w, r = p.double(), w.double(), r.double()
    flip = torch.where(r < 0, -1.0, 1.0).to(w)
    w = w * flip[:, None]
    r = r.abs()
    sign, a = torch.sign(w), w.abs()
    room = torch.where(w > 0, 1.0 - p, p).clamp_min(0.0)
    if norm == "Linf":
        tau, slope = room, a
    else:
        tau = torch.where(a > 0, room / a.clamp_min(1e-300), torch.zeros_like(a))
        slope = a * a
    tau_sorted, order = tau.sort(dim=1)
    slope_sorted = slope.gather(1, order)
    saturated = (a * room).gather(1, order).cumsum(dim=1)  # sum of a_j b_j over pixels j saturated by tau_k
    slope_from = slope_sorted.flip(1).cumsum(dim=1).flip(1)  # sum of slopes of pixels j >= k
    reach = saturated + tau_sorted * (slope_from - slope_sorted)  # <w, d(tau_k)>
    d_dim = p.shape[1]
    k = (reach < r[:, None]).sum(dim=1)  # the first breakpoint that reaches r
    feasible = k < d_dim
    kc = k.clamp(max=d_dim - 1)
    before = torch.where(k > 0, saturated.gather(1, (k - 1).clamp_min(0)[:, None]).squeeze(1), torch.zeros_like(r))
    rate = slope_from.gather(1, kc[:, None]).squeeze(1)
    t = ((r - before) / rate.clamp_min(1e-300)).clamp_min(0.0)
    # Out of reach: every pixel saturates (the largest finite t, so that t * 0 stays 0 for zero weights).
    t = torch.where(feasible, t, torch.full_like(t, torch.finfo(t.dtype).max))[:, None]
    d = sign * (torch.minimum(t.expand_as(room), room) if norm == "Linf" else torch.minimum(t * a, room))
    return d.to(dtype)


def _norm(v: torch.Tensor, norm: str) -> torch.Tensor:
    v = v.reshape(v.shape[0], -1)
    return v.abs().amax(dim=1) if norm == "Linf" else torch.linalg.vector_norm(v, dim=1)


def _dual_norm(v: torch.Tensor, norm: str) -> torch.Tensor:
    v = v.reshape(*v.shape[:-3], -1) if v.dim() >= 4 else v
    return v.abs().sum(dim=-1) if norm == "Linf" else torch.linalg.vector_norm(v, dim=-1)


def _view(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


# -- the attack ----------------------------------------------------------------------------------------------------
class FAB(Attack):
    """Untargeted FAB: each step heads for the class whose linearised decision boundary is closest."""

    name = "fab"
    needs_gradients = True
    reports_min_distance = True
    Config = FABConfig
    config: FABConfig

    def run_output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        runs: list[tuple[torch.Tensor | None, bool]] = [(None, r > 0) for r in range(self.config.restarts)]
        return self._attack(model, x, y, threat, generator, runs, predict(model, x) != y)

    # -- shared by both variants -----------------------------------------------------------------------------------
    def _attack(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        runs: list[tuple[torch.Tensor | None, bool]],
        fooled: torch.Tensor,
    ) -> AttackOutput:
        """One FAB run per entry of ``runs`` (targets or None, random start or not), each on the samples not yet
        fooled within eps; keeps the smallest adversarial point per sample over all runs, and reports its distance
        (``min_distance``, also beyond eps) with the budgeted result."""
        norm = threat.norm
        if norm not in FAB_NORMS:
            raise ValueError(f"{self.name} supports the {' and '.join(FAB_NORMS)} threat models, not {norm}")
        _check_generator(generator)
        best = x.clone()
        best_norm = torch.full(y.shape, math.inf, dtype=torch.float64, device=x.device)
        best_norm[fooled] = 0.0  # misclassified on arrival: the clean point, at distance 0
        for target, random_start in runs:
            idx = (best_norm > threat.eps).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            start = x[idx]
            if random_start:
                radius = 0.5 * best_norm.clamp(max=threat.eps)
                start = self._random_start(x, radius, norm, generator)[idx]
            tgt = None if target is None else target[idx]
            found, found_norm = self._search(model, x[idx], y[idx], tgt, start, norm)
            better = found_norm < best_norm[idx]
            best[idx[better]] = found[better]
            best_norm[idx[better]] = found_norm[better]
        # Measured as verify() measures: float64 on the flattened difference.
        exact = threat.distance(best.double(), x.double())
        within = _view(exact <= threat.eps, x)
        min_distance = torch.where(torch.isfinite(best_norm), exact, math.inf).cpu()
        return AttackOutput(torch.where(within, best, threat.project(best, x)), min_distance=min_distance)

    @staticmethod
    def _random_start(x: torch.Tensor, radius: torch.Tensor, norm: str, generator: torch.Generator) -> torch.Tensor:
        """For the whole batch: a random point at distance ``radius`` (per sample) from ``x``, clipped to [0, 1]."""
        n = x.shape[0]
        if norm == "Linf":
            t = 2.0 * torch.rand((n, x[0].numel()), generator=generator, dtype=torch.float64) - 1.0
            t = t / t.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
        else:
            t = torch.randn((n, x[0].numel()), generator=generator, dtype=torch.float64)
            t = t / torch.linalg.vector_norm(t, dim=1, keepdim=True).clamp_min(1e-30)
        delta = (t * radius.cpu()[:, None]).reshape(x.shape).to(device=x.device, dtype=x.dtype)
        return (x + delta).clamp(0.0, 1.0)

    def _linearise(
        self, model: nn.Module, z: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, norm: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``f = z_s - z_y`` at ``z`` and its input gradient, for the class ``s`` FAB heads for (per sample)."""
        with torch.enable_grad():
            z_req = z.detach().requires_grad_(True)
            logits = model(z_req)
            if target is not None:
                diff = logits.gather(1, target[:, None]) - logits.gather(1, y[:, None])
                (grad,) = torch.autograd.grad(diff.sum(), z_req)
                return diff.detach().squeeze(1), torch.nan_to_num(grad.detach(), nan=0.0)
            classes = logits.shape[1]
            grads = []
            for c in range(classes):
                (g,) = torch.autograd.grad(logits[:, c].sum(), z_req, retain_graph=c < classes - 1)
                grads.append(torch.nan_to_num(g.detach(), nan=0.0))
        jac = torch.stack(grads, dim=1)  # [N, K, C, H, W]
        logits = logits.detach()
        f = logits - logits.gather(1, y[:, None])
        w = jac - jac.gather(1, _view(y, jac).expand(-1, 1, *jac.shape[2:]))
        dist = f.abs() / (_dual_norm(w, norm) + _DIV_GUARD)
        dist = dist.masked_fill(F.one_hot(y, classes).bool(), math.inf)
        s = dist.argmin(dim=1)
        rows = torch.arange(len(s), device=s.device)
        return f[rows, s], w[rows, s]

    def _search(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        y: torch.Tensor,
        target: torch.Tensor | None,
        start: torch.Tensor,
        norm: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One FAB run (Algorithm 1 of the paper) from ``start``: per sample the smallest adversarial iterate the
        deployed model misclassifies and its norm (infinity, with the original point, where none was found)."""
        cfg = self.config
        n = x0.shape[0]
        flat0 = x0.reshape(n, -1)
        best = x0.clone()
        best_norm = torch.full((n,), math.inf, dtype=torch.float64, device=x0.device)
        cur = start
        for _ in range(cfg.steps):
            f, w = self._linearise(model, cur, y, target, norm)
            flat_w, flat_cur = w.reshape(n, -1), cur.reshape(n, -1)
            # The linearised boundary {v : f + <w, v - cur> = 0}, reached from cur and from the original point.
            r_cur = -f.double()
            r_orig = r_cur - (flat_w.double() * (flat0.double() - flat_cur.double())).sum(dim=1)
            d_cur = project_hyperplane_box(flat_cur, flat_w, r_cur, norm).view_as(cur)
            d_orig = project_hyperplane_box(flat0, flat_w, r_orig, norm).view_as(cur)
            n_cur, n_orig = _norm(d_cur, norm), _norm(d_orig, norm)
            alpha = (n_cur / (n_cur + n_orig).clamp_min(_DIV_GUARD)).clamp(0.0, cfg.alpha_max)
            alpha = _view(alpha, cur)
            new = ((1.0 - alpha) * (cur + cfg.eta * d_cur) + alpha * (x0 + cfg.eta * d_orig)).clamp(0.0, 1.0)
            adv = predict(model, new) != y
            dist = _norm((new - x0).double(), norm)
            improved = adv & (dist < best_norm)
            best = torch.where(_view(improved, new), new, best)
            best_norm = torch.where(improved, dist, best_norm)
            # Back towards the original after a success: the search continues for a smaller perturbation.
            cur = torch.where(_view(adv, new), (1.0 - cfg.beta) * x0 + cfg.beta * new, new)
        return best, best_norm


class FABT(FAB):
    """FAB-T: FAB against each of the ``n_target_classes`` most likely other classes in turn (AutoAttack).

    Targets are ranked by the clean logits; each gets ``restarts`` runs (the first from the original point) on the
    samples no earlier run has fooled within eps. With fewer classes every other class is a target once. Success
    means any wrong label, not necessarily the target's.
    """

    name = "fab_t"
    Config = FABTConfig
    config: FABTConfig

    def run_output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        cfg = self.config
        with torch.no_grad():
            clean = model(x)
        if clean.dim() != 2 or clean.shape[1] < 2:
            raise ValueError(f"fab_t needs logits [N, K] with K >= 2 classes, got {tuple(clean.shape)}")
        targets = most_likely_other_classes(clean, y, cfg.n_target_classes)
        runs: list[tuple[torch.Tensor | None, bool]] = [(t, r > 0) for t in targets.T for r in range(cfg.restarts)]
        return self._attack(model, x, y, threat, generator, runs, clean.argmax(dim=1) != y)


__all__ = ["FAB", "FABT", "FABConfig", "FABTConfig", "FAB_NORMS", "project_hyperplane_box"]
