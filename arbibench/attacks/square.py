"""Square Attack (Andriushchenko et al., ECCV 2020): random search over square-shaped updates, scores only.

Why it is in the benchmark: it needs no gradient at all, so a BNN whose gradients are useless (sign activations)
cannot hide behind gradient masking; it is AutoAttack's last component for exactly this reason.

Each iteration proposes, per sample, one square window of side ``s`` and keeps the proposal only if the margin loss
``z_y - max_{j != y} z_j`` drops (or the sample is fooled). The window's area is a fraction ``p`` of the image,
halved on the paper's schedule (iterations 10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000 of a 10000-query run,
rescaled to ``max_queries`` as the reference implementations do).

- Linf: the start is vertical stripes (each column of each channel at ``x +- eps``); a proposal sets its window,
  per channel, to ``x +- eps`` (clipped to [0, 1]).
- L2: the start is a grid of "meta-pattern" blocks (concentric rectangles of opposite sign in the two halves); a
  proposal moves L2 mass from a second window into the first, reshaped by the same pattern, and the whole
  perturbation is rescaled to norm ``eps`` before clipping to [0, 1].

Unlike the AutoAttack/torchattacks code, which draws one window position for the whole batch per iteration, every
sample draws its own window and signs (as in the paper's original code), and window positions cover all of
``0 .. h - s``. All draws come from the caller's generator, for the whole batch at every iteration (then the active
samples are selected), so a sample's draws do not depend on when the others are fooled. The initial point costs
one query, each iteration one query per still-robust sample: at most ``max_queries`` per sample in total. A sample
leaves the batch once the oracle says it is misclassified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arbibench.attacks.base import require_bool, require_int
from arbibench.attacks.losses import margin
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel

# Iterations (out of 10000) after which p is halved again: Andriushchenko et al., Sec. 3 / reference code.
P_SCHEDULE = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)


@dataclass(frozen=True)
class SquareConfig:
    max_queries: int = 5000  # AutoAttack's n_queries
    p_init: float = 0.8  # AutoAttack's default for both norms (the paper tunes 0.05-0.3 per model)
    rescale_schedule: bool = True  # stretch the 10000-iteration schedule of p to max_queries

    def __post_init__(self) -> None:
        require_int("max_queries", self.max_queries, 1)
        p = self.p_init
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
            raise ValueError(f"p_init must be a fraction of the image in (0, 1], got {p!r}")
        require_bool("rescale_schedule", self.rescale_schedule)


def p_at(iteration: int, p_init: float, max_queries: int, rescale: bool = True) -> float:
    """Fraction of pixels the square covers at ``iteration`` (0-based): ``p_init`` halved once per passed mark."""
    it = int(iteration / max_queries * 10000) if rescale else iteration
    halvings = sum(it > mark for mark in P_SCHEDULE)
    return p_init / (1 << halvings)  # 2**halvings: an int power (typeshed types int ** int as Any)


def meta_pattern(s: int) -> torch.Tensor:
    """The L2 attack's s x s update pattern: concentric-rectangle weights, +1 half on top, -1 half below, unit norm."""

    def rectangles(a: int, b: int) -> torch.Tensor:
        # Pixel weight: sum of 1/(k+1)^2 over the nested boxes k around the centre that contain it.
        ca, cb = a // 2, b // 2
        levels = max(ca, cb) + 1
        w = 1.0 / torch.arange(1, levels + 1, dtype=torch.float64) ** 2
        tail = w.flip(0).cumsum(0).flip(0)  # tail[d] = sum_{k >= d} w_k
        ring = torch.maximum((torch.arange(a)[:, None] - ca).abs(), (torch.arange(b)[None, :] - cb).abs())
        r = tail[ring]
        unit: torch.Tensor = r / torch.linalg.vector_norm(r)
        return unit

    top = rectangles(s // 2, s) if s // 2 else torch.zeros(0, s, dtype=torch.float64)
    pattern = torch.cat([top, -rectangles(s - s // 2, s)], dim=0)
    unit: torch.Tensor = pattern / torch.linalg.vector_norm(pattern)
    return unit.float()


def window_mask(top: torch.Tensor, left: torch.Tensor, s: int, h: int, w: int) -> torch.Tensor:
    """Boolean [N, 1, h, w] mask of each sample's s x s window at (top, left)."""
    rows = torch.arange(h, device=top.device)
    cols = torch.arange(w, device=top.device)
    in_rows = (rows[None, :] >= top[:, None]) & (rows[None, :] < top[:, None] + s)
    in_cols = (cols[None, :] >= left[:, None]) & (cols[None, :] < left[:, None] + s)
    return (in_rows[:, :, None] & in_cols[:, None, :])[:, None]


def _signs(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=generator).float() * 2.0 - 1.0


def _norms(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return t.square().sum(dim=dims, keepdim=True).sqrt()


class Square(BlackBoxAttack):
    """Score-based random search with square updates, margin loss, per-sample early exit (Linf and L2)."""

    name = "square"
    access = "scores"
    Config = SquareConfig
    config: SquareConfig

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        if threat.norm not in ("Linf", "L2"):
            raise ValueError(f"square supports Linf and L2 threat models, got {threat.norm}")
        n, c, h, w = x.shape
        dev = x.device
        everyone = torch.arange(n)
        x_best = threat.project(self._start(x, threat, generator), x)
        logits = yield from oracle.query_scores(x_best, everyone)
        best = margin(logits, y).neg()  # z_y - max other: the loss to minimise
        fooled = (logits.argmax(dim=1) != y).cpu()

        for i in range(self.config.max_queries - 1):
            active = (~fooled & (oracle.remaining() > 0)).nonzero().flatten()
            if active.numel() == 0:
                break
            p = p_at(i, self.config.p_init, self.config.max_queries, self.config.rescale_schedule)
            # Draw for the whole batch every iteration (then select), so each sample's draws are its own.
            if threat.norm == "Linf":
                draws = self._linf_draws(n, c, h, w, p, generator)
            else:
                draws = self._l2_draws(n, c, h, w, p, generator)
            a = active.to(dev)
            x_new = self._propose(x[a], x_best[a], threat, [d[active].to(dev) for d in draws], h, w)
            logits = yield from oracle.query_scores(x_new, active)
            loss = margin(logits, y[a]).neg()
            hit = logits.argmax(dim=1) != y[a]
            better = (loss < best[a]) | hit
            best[a] = torch.where(better, loss, best[a])
            x_best[a[better]] = x_new[better]
            fooled[active] = hit.cpu()

        x_adv = x.clone()
        x_adv[fooled.to(dev)] = x_best[fooled.to(dev)]
        return x_adv

    # -- Linf ------------------------------------------------------------------------------------------------------
    def _start(self, x: torch.Tensor, threat: ThreatModel, generator: torch.Generator) -> torch.Tensor:
        n, c, h, w = x.shape
        if threat.norm == "Linf":
            stripes = _signs((n, c, 1, w), generator).to(x)
            return (x + threat.eps * stripes).clamp(0.0, 1.0)
        # L2: a grid of meta-pattern blocks of side h // 5, each with a random sign per channel.
        s = max(h // 5, 1)
        delta = torch.zeros_like(x)
        pattern = meta_pattern(s).to(x)
        first = (h - s * (h // s)) // 2
        for bh in range(h // s):
            for bw in range(w // s):
                sign = _signs((n, c, 1, 1), generator).to(x)
                top, left = first + bh * s, first + bw * s
                delta[:, :, top : top + s, left : left + s] += pattern * sign
        delta = delta / _norms(delta, (1, 2, 3)).clamp_min(1e-12)
        return (x + threat.eps * delta).clamp(0.0, 1.0)

    @staticmethod
    def _linf_draws(n: int, c: int, h: int, w: int, p: float, generator: torch.Generator) -> list[torch.Tensor]:
        s = min(max(int(round(math.sqrt(p * h * w))), 1), h, w)
        top = torch.randint(0, h - s + 1, (n,), generator=generator)
        left = torch.randint(0, w - s + 1, (n,), generator=generator)
        side = torch.full((n,), s)
        return [top, left, side, _signs((n, c), generator)]

    @staticmethod
    def _l2_draws(n: int, c: int, h: int, w: int, p: float, generator: torch.Generator) -> list[torch.Tensor]:
        s = max(int(round(math.sqrt(p * h * w))), 3)
        s = min(s + 1 - s % 2, h, w)  # odd, as in the reference, so the pattern has a centre pixel
        top = torch.randint(0, h - s + 1, (n,), generator=generator)
        left = torch.randint(0, w - s + 1, (n,), generator=generator)
        top2 = torch.randint(0, h - s + 1, (n,), generator=generator)
        left2 = torch.randint(0, w - s + 1, (n,), generator=generator)
        side = torch.full((n,), s)
        flip = torch.randint(0, 2, (n,), generator=generator)
        return [top, left, side, _signs((n, c), generator), top2, left2, flip]

    def _propose(
        self,
        x: torch.Tensor,
        x_best: torch.Tensor,
        threat: ThreatModel,
        draws: list[torch.Tensor],
        h: int,
        w: int,
    ) -> torch.Tensor:
        eps = threat.eps
        top, left, side, signs = draws[:4]
        s = int(side[0])
        mask = window_mask(top, left, s, h, w)
        if threat.norm == "Linf":
            corner = (x + eps * signs[:, :, None, None]).clamp(0.0, 1.0)
            return torch.where(mask, corner, x_best)
        top2, left2, flip = draws[4:]
        m, c = x.shape[:2]
        delta = x_best - x
        mask2 = window_mask(top2, left2, s, h, w)
        # Window 1's current perturbation, gathered per sample and channel as [m, c, s, s].
        rows = top[:, None] + torch.arange(s, device=x.device)
        cols = left[:, None] + torch.arange(s, device=x.device)
        ar = torch.arange(m, device=x.device)
        old = delta[ar[:, None, None], :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
        norm_image = _norms(delta, (1, 2, 3))
        norm_windows = _norms(delta * (mask | mask2), (1, 2, 3))
        pattern = meta_pattern(s).to(x)
        pattern = torch.where(flip.bool()[:, None, None], pattern.t()[None], pattern[None])[:, None]
        new = pattern * signs[:, :, None, None] + old / _norms(old, (2, 3)).clamp_min(1e-12)
        # Give the window the mass it held plus its share of what the ball still has room for.
        room = ((eps**2 - norm_image.square()).clamp_min(0.0) / c + norm_windows.square()).sqrt()
        new = new / _norms(new, (2, 3)).clamp_min(1e-12) * room
        delta = torch.where(mask2, torch.zeros_like(delta), delta)
        placed = torch.zeros_like(delta)
        placed[ar[:, None, None], :, rows[:, :, None], cols[:, None, :]] = new.permute(0, 2, 3, 1)
        delta = torch.where(mask, placed, delta)
        delta = delta / _norms(delta, (1, 2, 3)).clamp_min(1e-12)
        return threat.project((x + eps * delta).clamp(0.0, 1.0), x)
