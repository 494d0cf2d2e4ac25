"""HopSkipJump (Chen, Jordan & Wainwright, IEEE S&P 2020): a decision-based attack that walks along the boundary.

Only top-1 labels are used (``access = "labels"``). From a misclassified start the attack repeats three moves, each
made of label queries alone:

1. a binary search towards the original, onto the decision boundary;
2. a Monte-Carlo estimate of the boundary's normal there, from the decisions on ``B`` random probes at radius
   ``delta``: ``B = init_evals * sqrt(t)`` at iteration ``t`` (100 at first, capped at ``max_evals``), with the
   mean decision subtracted as a baseline (the paper's variance reduction);
3. a geometric step-size search along that direction: ``dist / sqrt(t)``, halved until the step is adversarial.

The L2 version moves along the estimate and binary-searches on the segment to the original; the Linf version moves
along its sign and binary-searches over Linf balls (clipping to radius r around the original), as the paper does.
Binary searches stop at the paper's threshold theta = gamma / d^(3/2) (L2) or gamma / d^2 (Linf), gamma = 1;
delta is 0.1 at the first iteration, then sqrt(d) * theta * dist (L2) or d * theta * dist (Linf).

The start is the paper's: uniform-noise images drawn until one is misclassified (at most ``init_tries``), then a
coarse binary search on the blend with the original (tolerance 1e-3, as in the authors' code). Before that, the
original itself is queried once: an image misclassified on arrival is done at distance 0 whatever the noise does
(on some models every noise draw lands in the very class the wrong label names).

Budget: ``max_queries`` per sample, default 1000 (the paper runs to 25k; 1000 keeps a CPU evaluation affordable,
raise it for headline numbers). A sample stops as soon as any query of any phase was adversarial within eps (early
exit) or its budget is spent. Its result is the closest adversarial point any query found, returned when within
eps, and ``min_distance`` holds that point's distance for every sample (``inf`` where none was found).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arbibench.attacks.base import DECISION_BASED, require_int, require_positive_float
from arbibench.attacks.query import BlackBoxAttack, QueryModel, QuerySteps
from arbibench.attacks.threat import ThreatModel

# Images per oracle call: bounds memory when probes for many samples are queried at once.
QUERY_CHUNK = 512
# The step-size search halves at most this many times (2^-30 of the start): the paper's loop is unbounded.
MAX_HALVINGS = 30
# Coarse blend search of the start (the authors' code stops at this width).
START_TOLERANCE = 1e-3
FIRST_DELTA = 0.1  # probe radius of the first iteration, a tenth of the pixel range (the paper's choice)


class DecisionLog:
    """Labels-only queries for a decision-based attack, remembering per sample the closest adversarial point seen.

    Every query goes through :meth:`decide`, whatever phase makes it (start, probes, step search, binary search), so
    a sample is done the moment any of its queries is adversarial within eps, and the point returned is that very
    point: the attack's result and the oracle's "queries at success" always describe the same query.
    """

    def __init__(self, oracle: QueryModel, threat: ThreatModel) -> None:
        self.oracle, self.threat = oracle, threat
        n = len(oracle)
        self.best = oracle.x0.clone()
        self.best_dist = torch.full((n,), math.inf, dtype=torch.float64)
        self.done = torch.zeros(n, dtype=torch.bool)  # adversarial within eps found: stop querying

    def can_query(self, need: int = 1) -> torch.Tensor:
        """Mask [N] of samples not done that still have ``need`` queries left."""
        return ~self.done & (self.oracle.remaining() >= need)

    def remaining(self, idx: torch.Tensor) -> torch.Tensor:
        return self.oracle.remaining(idx)

    def decide(self, x: torch.Tensor, idx: torch.Tensor) -> QuerySteps:
        """Query steps: whether each input (belonging to original ``idx``) is adversarial; bool on CPU, one query
        each (``adv = yield from log.decide(x, idx)``)."""
        idx = idx.cpu()
        x = x.detach()
        adv = (yield from self.oracle.query_adversarial(x, idx)).cpu()
        self._record(x, idx, adv)
        return adv

    def _record(self, x: torch.Tensor, idx: torch.Tensor, adv: torch.Tensor) -> None:
        if not bool(adv.any()):
            return
        dev = x.device
        j = adv.nonzero().flatten()
        owners = idx[j]
        dist = self.threat.distance(x[j.to(dev)].double(), self.oracle.x0[owners.to(dev)].double()).cpu()
        n = self.best_dist.numel()
        closest = torch.full((n,), math.inf, dtype=torch.float64).scatter_reduce(0, owners, dist, "amin")
        better = ((dist == closest[owners]) & (dist < self.best_dist[owners])).nonzero().flatten()
        if better.numel() == 0:
            return
        # first of the closest inputs per sample (deterministic whatever the order of equal distances)
        first = torch.full((n,), j.numel(), dtype=torch.int64).scatter_reduce(0, owners[better], better, "amin")
        samples = (first < j.numel()).nonzero().flatten()
        self.best[samples.to(dev)] = x[j[first[samples]].to(dev)]
        self.best_dist[samples] = dist[first[samples]]
        # the oracle's own test for "within eps" (float64, 1e-6 tolerance, the same as ThreatModel.verify)
        self.done |= self.best_dist <= self.threat.eps + 1e-6

    def result(self) -> torch.Tensor:
        """The closest adversarial point where it is within eps, else the original."""
        keep = self.done.to(self.best.device).view(-1, *([1] * (self.best.dim() - 1)))
        return torch.where(keep, self.best, self.oracle.x0)


@dataclass(frozen=True)
class HSJAConfig:
    max_queries: int = 1000  # per sample; the paper reports up to 25k (see module docstring)
    init_evals: int = 100  # probes of the first gradient estimate, growing as sqrt(t) (Chen et al. 2020)
    max_evals: int = 10_000  # cap on probes per estimate (authors' code)
    gamma: float = 1.0  # binary-search threshold theta = gamma / d^(3/2) (L2) or gamma / d^2 (Linf)
    init_tries: int = 100  # uniform-noise draws allowed to find a misclassified start

    def __post_init__(self) -> None:
        require_int("max_queries", self.max_queries, 1)
        require_int("init_evals", self.init_evals, 1)
        require_int("max_evals", self.max_evals, 1)
        require_positive_float("gamma", self.gamma)
        require_int("init_tries", self.init_tries, 1)
        if self.max_evals < self.init_evals:
            raise ValueError(f"max_evals ({self.max_evals}) must be >= init_evals ({self.init_evals})")


def _view(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Per-sample scalars ``t`` [m] shaped to broadcast against a batch ``like``, on its device and dtype."""
    return t.to(device=like.device, dtype=like.dtype).view(-1, *([1] * (like.dim() - 1)))


class HopSkipJump(BlackBoxAttack):
    """HopSkipJump, L2 or Linf after the threat model, labels only, per-sample budget and early exit."""

    name = "hsja"
    family = DECISION_BASED
    access = "labels"
    Config = HSJAConfig
    config: HSJAConfig
    revision = 1  # 1: the original is queried first (one query of the budget)

    def steps(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
        min_distance: list[torch.Tensor],
    ) -> QuerySteps:
        if threat.norm not in ("L2", "Linf"):
            raise ValueError(f"hsja supports the L2 and Linf threat models, not {threat.norm}")
        cfg = self.config
        linf = threat.norm == "Linf"
        log = DecisionLog(oracle, threat)
        d = x[0].numel()
        theta = cfg.gamma / (d**2 if linf else d**1.5)

        cur, started = yield from self._start(log, x, generator)
        idx = started.nonzero().flatten()
        t = 0
        if idx.numel():
            cur, dist = yield from self._boundary(log, x, idx, cur[idx.to(x.device)], linf, theta)
        while idx.numel():
            t += 1
            live = log.can_query()[idx]
            idx, cur, dist = idx[live], cur[live.to(x.device)], dist[live]
            if idx.numel() == 0:
                break
            if t == 1:
                delta = torch.full_like(dist, FIRST_DELTA)
            else:
                delta = (d * theta if linf else math.sqrt(d) * theta) * dist
            evals = min(int(cfg.init_evals * math.sqrt(t)), cfg.max_evals)
            grad = yield from self._direction(log, cur, idx, evals, delta, linf, generator)
            update = grad.sign() if linf else grad
            stepped, moved = yield from self._step(log, cur, idx, update, dist / math.sqrt(t))
            if bool(moved.any()):
                m = moved.to(x.device)
                cur[m], dist[moved] = yield from self._boundary(log, x, idx[moved], stepped[m], linf, theta)
        min_distance.append(log.best_dist.clone())
        return log.result()

    def _start(
        self, log: DecisionLog, x: torch.Tensor, generator: torch.Generator
    ) -> QuerySteps:
        """Misclassified uniform noise, pulled towards the original by a coarse blend search; and which have one."""
        n = x.shape[0]
        dev = x.device
        noise = x.clone()
        found = torch.zeros(n, dtype=torch.bool)
        yield from log.decide(x, torch.arange(n))  # misclassified on arrival: done at distance 0, one query
        for _ in range(self.config.init_tries):
            idx = (~found & log.can_query()).nonzero().flatten()
            if idx.numel() == 0:
                break
            draw = torch.rand((idx.numel(), *x.shape[1:]), generator=generator).to(device=dev, dtype=x.dtype)
            adv = yield from log.decide(draw, idx)
            noise[idx[adv].to(dev)] = draw[adv.to(dev)]
            found[idx[adv]] = True
        lo = torch.zeros(n, dtype=torch.float64)
        hi = torch.ones(n, dtype=torch.float64)
        while True:
            act = (found & log.can_query() & (hi - lo > START_TOLERANCE)).nonzero().flatten()
            if act.numel() == 0:
                break
            mid = (lo[act] + hi[act]) / 2
            xa, na = x[act.to(dev)], noise[act.to(dev)]
            adv = yield from log.decide(xa + _view(mid, xa) * (na - xa), act)
            hi[act] = torch.where(adv, mid, hi[act])
            lo[act] = torch.where(adv, lo[act], mid)
        # hi = 1 is the noise itself; otherwise the blend at hi was queried and found adversarial
        blended = torch.where(_view(hi < 1, x).bool(), x + _view(hi, x) * (noise - x), noise)
        return blended, found

    def _boundary(
        self,
        log: DecisionLog,
        x: torch.Tensor,
        idx: torch.Tensor,
        far: torch.Tensor,
        linf: bool,
        theta: float,
    ) -> QuerySteps:
        """Binary search from adversarial points ``far`` towards the originals ``x[idx]``; returns the adversarial
        end of each final interval (a point that was queried, or ``far``) and its distance (float64, CPU).

        L2 searches the blend ratio on the segment; Linf searches the radius r of the clipping to the Linf ball
        around the original (the paper's Linf projection), with threshold min(dist * theta, theta).
        """
        dev = x.device
        x0 = x[idx.to(dev)]
        dist0 = log.threat.distance(far.double(), x0.double()).cpu()
        if linf:
            hi, thr = dist0.clone(), torch.minimum(dist0 * theta, torch.full_like(dist0, theta))
        else:
            hi, thr = torch.ones_like(dist0), torch.full_like(dist0, theta)
        start = hi.clone()
        lo = torch.zeros_like(hi)

        def project(a: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
            xs, fs = x0[sel.to(dev)], far[sel.to(dev)]
            if linf:
                r = _view(a, xs)
                return torch.minimum(torch.maximum(fs, xs - r), xs + r)
            return xs + _view(a, xs) * (fs - xs)

        while True:
            sel = (((hi - lo) > thr) & log.can_query()[idx]).nonzero().flatten()
            if sel.numel() == 0:
                break
            mid = (lo[sel] + hi[sel]) / 2
            adv = yield from log.decide(project(mid, sel), idx[sel])
            hi[sel] = torch.where(adv, mid, hi[sel])
            lo[sel] = torch.where(adv, lo[sel], mid)
        everyone = torch.arange(idx.numel())
        out = torch.where(_view(hi < start, far).bool(), project(hi, everyone), far)
        return out, log.threat.distance(out.double(), x0.double()).cpu()

    def _direction(
        self,
        log: DecisionLog,
        cur: torch.Tensor,
        idx: torch.Tensor,
        evals: int,
        delta: torch.Tensor,
        linf: bool,
        generator: torch.Generator,
    ) -> QuerySteps:
        """Unit (L2) estimate of the boundary normal at each ``cur``, pointing to the adversarial side.

        Probes are unit vectors (uniform in the cube for Linf, Gaussian for L2, as in the paper), clipped to the
        image box (the estimate uses the clipped displacement), at most ``evals`` per sample and never more than
        its remaining budget.
        """
        dev, m = cur.device, idx.numel()
        flat = cur.reshape(m, -1)
        dim = flat.shape[1]
        use_n = log.remaining(idx).clamp(max=evals)
        grads = torch.zeros_like(flat)
        per = max(1, QUERY_CHUNK // evals)  # samples whose probes are built at once
        for s in range(0, m, per):
            k = min(per, m - s)
            shape = (k, evals, dim)
            if linf:
                u = torch.rand(shape, generator=generator) * 2 - 1
            else:
                u = torch.randn(shape, generator=generator)
            u = (u / torch.linalg.vector_norm(u, dim=2, keepdim=True).clamp_min(1e-12)).to(device=dev, dtype=flat.dtype)
            use = torch.arange(evals).view(1, -1) < use_n[s : s + k].view(-1, 1)  # [k, evals], CPU
            if not bool(use.any()):
                continue
            dk = _view(delta[s : s + k], u)
            probes = (flat[s : s + k].unsqueeze(1) + dk * u).clamp(0.0, 1.0)
            u = (probes - flat[s : s + k].unsqueeze(1)) / dk  # the probe actually made, after clipping to the box
            owners = idx[s : s + k].view(-1, 1).expand(k, evals)[use]
            adv = yield from log.decide(probes[use.to(dev)].view(-1, *cur.shape[1:]), owners)
            f = torch.zeros(k, evals, dtype=torch.float64)
            f[use] = adv.double() * 2 - 1
            count = use.sum(dim=1).clamp_min(1)
            mean = f.sum(dim=1) / count
            # baseline: subtract the mean decision, unless all agree (then the mean probe is the estimate)
            w = torch.where((mean.abs() == 1).view(-1, 1), f, (f - mean.view(-1, 1)) * use)
            grads[s : s + k] = (w.to(device=dev, dtype=u.dtype).unsqueeze(2) * u).sum(dim=1)
        norms = torch.linalg.vector_norm(grads, dim=1, keepdim=True)
        grads = torch.where(norms > 0, grads / norms.clamp_min(1e-30), grads)
        return grads.view_as(cur)

    def _step(
        self, log: DecisionLog, cur: torch.Tensor, idx: torch.Tensor, update: torch.Tensor, size: torch.Tensor
    ) -> QuerySteps:
        """Geometric step-size search: from ``size``, halve until ``cur + size * update`` is adversarial.

        Returns the adversarial stepped points and a mask of samples that found one (the others keep ``cur``).
        """
        dev = cur.device
        size = size.clone()
        stepped = cur.clone()
        moved = torch.zeros(idx.numel(), dtype=torch.bool)
        nonzero = update.reshape(idx.numel(), -1).abs().amax(dim=1).cpu() > 0
        for _ in range(MAX_HALVINGS + 1):
            sel = (~moved & nonzero & log.can_query()[idx]).nonzero().flatten()
            if sel.numel() == 0:
                break
            sd = sel.to(dev)
            cand = (cur[sd] + _view(size[sel], cur) * update[sd]).clamp(0.0, 1.0)
            adv = yield from log.decide(cand, idx[sel])
            stepped[sd[adv.to(dev)]] = cand[adv.to(dev)]
            moved[sel[adv]] = True
            size[sel[~adv]] /= 2
        return stepped, moved
