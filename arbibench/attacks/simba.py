"""SimBA-DCT (Guo et al., ICML 2019): coordinate-wise random search in a low-frequency DCT basis, scores only.

Why: it is the simplest score-based attack that works, so it is a baseline any robustness claim must survive, and
stepping along smooth (low-frequency) directions needs few queries on natural images.

Each iteration takes the next orthonormal DCT basis image ``q`` (one channel, frequencies ``(u, v)``) in an order
that visits the ``freq_dims x freq_dims`` lowest frequencies of every channel first (randomly permuted), then rings
of ``stride`` higher frequencies, each ring permuted. It tries ``x + step q``; if the probability of the true class
does not drop it tries ``x - step q``; a candidate is kept when that probability drops (or the sample is fooled).
So each direction costs one or two queries, plus one query for the start.

Staying inside the threat model (the paper's steps are unconstrained in Linf):
- Linf: a step is ``step_linf * eps * q / max|q|``, i.e. its largest pixel change is ``step_linf * eps``; each
  candidate is then projected onto the eps-ball and [0, 1] (clipping), and the projected point is what is queried
  and kept. After projection, steps are no longer orthogonal, so a kept step may partly undo an earlier one.
- L2: a step is ``step_l2 * eps * q`` (L2 length ``step_l2 * eps``); candidates are projected onto the ball.

One order is drawn per pass over all ``c * h * w`` directions and shared by the batch (as in the reference code);
a new pass (fresh order) starts if the budget outlasts it. Fooled samples leave the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arbibench.attacks.base import require_int, require_positive_float
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class SimBAConfig:
    max_queries: int = 10000  # the paper's budget per image (ImageNet)
    freq_dims: int = 8  # side of the low-frequency block tried first (a quarter of a 32-pixel side)
    stride: int = 4  # width of each further ring of frequencies
    step_linf: float = 1.0  # Linf: largest pixel change of one step, in units of eps
    step_l2: float = 0.25  # L2: length of one step, in units of eps (the paper's 0.2 is absolute, for ImageNet)

    def __post_init__(self) -> None:
        require_int("max_queries", self.max_queries, 1)
        require_int("freq_dims", self.freq_dims, 1)
        require_int("stride", self.stride, 1)
        require_positive_float("step_linf", self.step_linf)
        require_positive_float("step_l2", self.step_l2)
        if self.step_linf > 1.0:
            raise ValueError(f"step_linf must be <= 1 (a step larger than eps is clipped anyway), got {self.step_linf}")


def dct_matrix(size: int) -> torch.Tensor:
    """Orthonormal DCT-II matrix [size, size]: row k is the k-th cosine basis vector (unit L2 norm)."""
    k = torch.arange(size, dtype=torch.float64)[:, None]
    j = torch.arange(size, dtype=torch.float64)[None, :]
    d = torch.cos(math.pi * (2 * j + 1) * k / (2 * size)) * math.sqrt(2.0 / size)
    d[0] /= math.sqrt(2.0)
    return d


def low_frequency_order(
    c: int, h: int, w: int, freq_dims: int, stride: int, generator: torch.Generator
) -> torch.Tensor:
    """Flat indices into [c, h, w] frequency space: the low-frequency block first, then rings, each permuted."""
    u = torch.arange(h)[None, :, None].expand(c, h, w)
    v = torch.arange(w)[None, None, :].expand(c, h, w)
    ring = torch.maximum(u, v).flatten()
    # Ring 0: max(u, v) < freq_dims; ring r > 0: freq_dims + (r - 1) * stride <= max(u, v) < freq_dims + r * stride.
    level = torch.where(ring < freq_dims, 0, (ring - freq_dims) // stride + 1)
    noise = torch.rand(ring.shape, generator=generator, dtype=torch.float64)
    return torch.argsort(level.double() + noise)  # noise < 1 permutes within a level only


class SimBA(BlackBoxAttack):
    """SimBA-DCT on the true class's probability, within the threat model, with per-sample early exit."""

    name = "simba"
    access = "scores"
    Config = SimBAConfig
    config: SimBAConfig

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
            raise ValueError(f"simba supports Linf and L2 threat models, got {threat.norm}")
        cfg = self.config
        n, c, h, w = x.shape
        dev = x.device
        dct_h, dct_w = dct_matrix(h), dct_matrix(w)
        x_cur = x.clone()
        logits = yield from oracle.query_scores(x_cur, torch.arange(n))
        prob = self._true_prob(logits, y)
        fooled = (logits.argmax(dim=1) != y).cpu()
        order = low_frequency_order(c, h, w, cfg.freq_dims, cfg.stride, generator)
        t = 0
        while True:
            active = (~fooled & (oracle.remaining() > 0)).nonzero().flatten()
            if active.numel() == 0:
                break
            if t == order.numel():
                order, t = low_frequency_order(c, h, w, cfg.freq_dims, cfg.stride, generator), 0
            ch, rest = divmod(int(order[t]), h * w)
            fu, fv = divmod(rest, w)
            t += 1
            direction = torch.zeros(c, h, w, dtype=torch.float64)
            direction[ch] = torch.outer(dct_h[fu], dct_w[fv])
            if threat.norm == "Linf":
                direction *= cfg.step_linf * threat.eps / float(direction.abs().max())
            else:
                direction *= cfg.step_l2 * threat.eps
            direction = direction.to(x)
            # Try +q for every active sample, then -q for those +q did not help (and that have a query left).
            todo = active
            for sign in (1.0, -1.0):
                if todo.numel() == 0:
                    break
                a = todo.to(dev)
                cand = threat.project(x_cur[a] + sign * direction, x[a])
                logits = yield from oracle.query_scores(cand, todo)
                p = self._true_prob(logits, y[a])
                hit = logits.argmax(dim=1) != y[a]
                better = (p < prob[a]) | hit
                keep = a[better]
                x_cur[keep], prob[keep] = cand[better], p[better]
                fooled[todo] = hit.cpu()
                todo = todo[~better.cpu()]
                todo = todo[oracle.remaining(todo) > 0]

        x_adv = x.clone()
        x_adv[fooled.to(dev)] = x_cur[fooled.to(dev)]
        return x_adv

    @staticmethod
    def _true_prob(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # The log of the probability (same order, float64): a confident model's p_y rounds to 1.0 in float32,
        # where every step would look useless.
        return torch.log_softmax(logits.double(), dim=1).gather(1, y[:, None]).squeeze(1)
