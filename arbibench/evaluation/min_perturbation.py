"""Minimal adversarial perturbation per image (eps*), searched down to the scale where each image is fooled.

At the headline eps every BNN of a CPU-trained zoo may end at 0% robust accuracy, so a ranking by robust accuracy
alone ranks noise. The smallest perturbation at which some attack fools each image still separates such models:
``eps*_i`` is the smallest distance of a verified adversarial example found for image ``i`` (0 for an image
misclassified clean, ``inf`` when none was found up to ``eps_max``). It is an *upper bound* on the true minimal
perturbation, like every attack-based number; robust accuracy at eps is then the fraction of images with
``eps*_i > eps``, an upper bound on the true robust accuracy. Between two radii the search ran, an image's eps* is
only bracketed (the attacks failed at the lower radius and found the example at the upper one), so this curve may lie
above what the attacks would show at an eps the search never tried; the curve's low end counts such an image as fooled
(:meth:`MinimalPerturbation.robust_accuracy_low`), and the attacks' own curve lies between the two.

Why the search goes down by factors and not by halves of ``eps_max``: a sign network's eps* is often 10-100 times
below one grey level, so a bisection of ``[0, eps_max]`` stops at its first step (``eps_max / 2**rounds``) for
nearly every image and cannot tell one BNN from another. The search here:

1. **descent**: radii log-spaced from ``eps_max`` down to ``eps_floor`` (each step at most a factor 2). An image
   is attacked at the next radius below the smallest example found so far, until a radius where nothing fools it;
2. **bisection** between that radius and the example found, in ``search_rounds`` rounds on the same log grid
   (resolution ``2 ** (1 / 2**search_rounds)``), so images that share a radius are attacked together;
3. at every radius, **random sign corners** (:class:`~arbibench.attacks.corners.RandomCorners`, ``probe_draws``
   draws, labels only) go first, and only the images they leave unfooled meet the attacks, in order.

Every run is planned and executed as :func:`~arbibench.evaluation.runner.evaluate` does it, so each example is verified
against the threat model and on the model before it counts, and every finished batch is read back from the store by a
rerun. An image fooled even at ``eps_floor`` is *censored*: its eps* is only known to be at most the floor ("<= floor")
and is never reported as the floor. Medians are given over the correctly classified images (robustness alone) beside the
median over all images (misclassified ones at 0, which mixes clean accuracy in), each with the distribution-free
interval. ``certified`` holds a per-image *lower* bound on eps* where a verifier supplied one.

On the 8-bit input grid (``grid="uint8"``) the radii are whole grey levels: the descent halves the level count from
``eps_max`` down to 1/255 and the bisection runs over levels until adjacent. Nothing below one level is reachable
there, so an image fooled at 1/255 has eps* = 1/255 exactly and no image is censored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.attacks import Attack, get_threat_model
from arbibench.attacks.corners import RandomCorners
from arbibench.attacks.threat import FLOAT, GRIDS
from arbibench.evaluation.executors import Executor
from arbibench.evaluation.plan import plan_evaluation
from arbibench.evaluation.runner import execute
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import ResultStore
from arbibench.evaluation.surrogates import attack_for_target
from arbibench.inference import Inference

#: The smallest radius the search tries unless told otherwise: a thousandth of a grey level, below the eps* of most
#: images of a sign network (a grey level is 1/255).
EPS_FLOOR = 1e-3 / 255
# The search's settings as minimal_perturbation names them, for check_search's errors.
SEARCH_SETTINGS = ("eps_max", "eps_floor", "search_rounds", "probe_draws")
#: The name of this search in summaries and cards. Cards without it hold the earlier bisection of ``[0, eps_max]``,
#: whose first step (``eps_max / 2**rounds``) was its floor.
SEARCH = "descent"
#: What :meth:`~arbibench.attacks.threat.ThreatModel.verify` accepts beyond eps: an example at eps_max measures a
#: hair above it after float32 rounding and still counts at eps_max.
VERIFY_TOL = 1e-6


def _binomial_half_cdf(n: int) -> np.ndarray:
    """P(B <= k) for B ~ Binomial(n, 1/2), k = 0..n, computed in log space (n may be in the thousands)."""
    k = np.arange(n + 1)
    log_pmf = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k]) - n * math.log(2)
    return np.cumsum(np.exp(log_pmf))


def median_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: the order statistics ``v_(l)`` and ``v_(n+1-l)``.

    ``l`` is the largest rank with ``P(B < l) <= (1 - confidence) / 2`` for ``B ~ Binomial(n, 1/2)``, so the
    interval covers the median with probability at least ``confidence`` whatever the distribution. It works with
    ``inf`` entries (images never fooled): the bounds are order statistics, so they may be ``inf`` too.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if n == 0:
        return (math.nan, math.nan)
    cdf = _binomial_half_cdf(n)
    alpha = 1.0 - confidence
    ranks = [rank for rank in range(1, (n + 1) // 2 + 1) if cdf[rank - 1] <= alpha / 2]
    rank = ranks[-1] if ranks else 1  # too few images for the confidence: the whole range
    return float(v[rank - 1]), float(v[n - rank])



def _num(v: float) -> float | None:
    """A JSON number: ``None`` for an infinite (never fooled) or undefined value."""
    return None if math.isinf(v) or math.isnan(v) else v


@dataclass(frozen=True)
class LogGrid:
    """The radii the search may try: positions ``p = 0 .. top`` with radius ``eps_max * (floor / eps_max) ** (1 -
    p / top)`` (``top``: ``eps_max``, 0: the floor). The descent visits every ``2**rounds``-th position (a factor of
    at most 2 apart); bisection rounds the positions between, so images that share a radius are attacked together."""

    eps_max: float
    floor: float
    rounds: int

    @property
    def unit(self) -> int:
        """Positions per descent step."""
        return int(2**self.rounds)

    @property
    def top(self) -> int:
        steps = max(1, math.ceil(math.log2(self.eps_max / self.floor) - 1e-9))
        return steps * self.unit

    #: An image fooled at the floor may have a smaller eps* than the floor: "<= floor".
    censors = True

    @property
    def rounds_needed(self) -> int:
        return self.rounds

    def descent_positions(self) -> list[int]:
        """The positions the descent visits, largest first."""
        return list(range(self.top, -1, -self.unit))

    def radius(self, p: int) -> float:
        if p == self.top:
            return self.eps_max
        return float(self.eps_max * (self.floor / self.eps_max) ** (1.0 - p / self.top))

    def position(self, eps: float) -> float:
        """The real-valued grid position of ``eps`` (outside ``[0, top]`` for radii outside the grid)."""
        return self.top * (1.0 - math.log(eps / self.eps_max) / math.log(self.floor / self.eps_max))

    def descent_below(self, below: float, above: int) -> int | None:
        """The largest descent position under ``above`` whose radius lies strictly below ``below``; None past the
        floor."""
        p = above - self.unit
        while p >= 0 and self.radius(p) >= below:
            p -= self.unit
        return p if p >= 0 else None

    def midpoint(self, lo: int, hi: float) -> int | None:
        """The position nearest the geometric middle of ``(radius(lo), hi)``, strictly inside it; None once the
        bracket spans at most one position."""
        top = self.position(hi)  # a radius of the grid comes back a hair off its integer position
        return None if top - lo <= 1 + 1e-6 else round((lo + top) / 2)


@dataclass(frozen=True)
class LevelGrid:
    """The radii of the 8-bit grid: position ``p`` is ``p + 1`` grey levels, up to ``eps_max`` (rounded down to whole
    levels). The descent halves the level count; bisection runs over levels until two are adjacent. Nothing below one
    level is reachable on the grid, so the floor (1/255) is exact and censors nothing."""

    eps_max: float
    levels_per_unit: int = 255

    censors = False

    @property
    def levels(self) -> int:
        return max(1, int(self.eps_max * self.levels_per_unit + 1e-6))

    @property
    def top(self) -> int:
        return self.levels - 1

    @property
    def floor(self) -> float:
        return self.radius(0)

    @property
    def rounds_needed(self) -> int:
        return max(1, math.ceil(math.log2(self.levels)))

    def descent_positions(self) -> list[int]:
        out, level = [], self.levels
        while level >= 1:
            out.append(level - 1)
            level = level // 2 if level > 1 else 0
        return out

    def radius(self, p: int) -> float:
        return (p + 1) / self.levels_per_unit

    def position(self, eps: float) -> float:
        return eps * self.levels_per_unit - 1

    def descent_below(self, below: float, above: int) -> int | None:
        """The largest descent position under ``above`` whose radius lies strictly below ``below``; None past one
        level."""
        for p in self.descent_positions():
            if p < above and self.radius(p) < below - 1e-9:
                return p
        return None

    def midpoint(self, lo: int, hi: float) -> int | None:
        top = round(self.position(hi))
        return None if top - lo <= 1 else (lo + top) // 2


@dataclass
class MinimalPerturbation:
    """Per-image eps* of one model under one norm, and what follows from it."""

    norm: str
    eps_max: float
    attacks: tuple[str, ...]
    sample_index: np.ndarray
    eps_star: np.ndarray  # per image: 0 misclassified clean, inf not fooled up to eps_max, else the distance found
    search_rounds: int
    eps_floor: float  # the smallest radius tried
    probe_draws: int  # random sign corners per image and radius, tried first (0: none)
    clean_correct: np.ndarray  # per image
    censored: np.ndarray  # per image: fooled even at eps_floor, so eps* <= eps_floor is all that is known
    found_by: np.ndarray  # per image: what found the example of eps* ("corners" or an attack; "" where none)
    # per image, a certified lower bound on eps* (no example exists below it) where a verifier supplied one
    certified: np.ndarray | None = None
    grid: str = FLOAT  # the input grid the examples lie on ("uint8": eps* in whole grey levels)
    # per image, the largest radius at which the search attacked it and fooled nothing (eps_max where nothing fooled
    # it; 0 where it was fooled even at the floor or misclassified clean): the low end of its eps* bracket
    survived: np.ndarray | None = None

    @property
    def bounded(self) -> np.ndarray:
        """eps* with every censored image at ``eps_floor``: what medians and intervals are order statistics of.

        Every other correctly classified image's eps* lies above the floor, so a statistic at the floor means
        "<= floor", never a measurement of the floor."""
        return np.where(self.censored, self.eps_floor, self.eps_star)

    @property
    def median(self) -> float:
        """Median eps* over every image (misclassified ones at 0: clean accuracy mixed in)."""
        return float(np.median(self.bounded)) if len(self.eps_star) else math.nan

    def median_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return median_interval(self.bounded, confidence)

    @property
    def median_correct(self) -> float:
        """Median eps* over the correctly classified images: robustness alone."""
        values = self.bounded[self.clean_correct]
        return float(np.median(values)) if len(values) else math.nan

    def median_correct_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return median_interval(self.bounded[self.clean_correct], confidence)

    def is_censored(self, value: float) -> bool:
        """Whether a statistic of :attr:`bounded` means "<= eps_floor" (never where no image was censored)."""
        return value <= self.eps_floor and bool(self.censored.any())

    def robust_accuracy(self, eps: float) -> float:
        """Fraction of images no attack fooled within ``eps`` (an upper bound on the true robust accuracy); within
        means what the threat model accepts, ``eps`` plus its tolerance for float32 rounding."""
        return float((self.eps_star > eps + VERIFY_TOL).mean())

    def robust_accuracy_low(self, eps: float) -> float | None:
        """Fraction of correctly classified images the search attacked at a radius of at least ``eps`` without
        fooling them: at a radius the search ran, what its attacks show there; between its radii an image whose eps*
        bracket holds ``eps`` counts as fooled. None without the brackets (:attr:`survived`)."""
        if self.survived is None:
            return None
        return float((self.clean_correct & (self.survived >= eps * (1 - 1e-9))).mean())

    def curve(self, n_points: int = 17) -> list[tuple[float, float, float | None]]:
        """(eps, robust accuracy, its low end) at ``n_points`` evenly spaced eps from 0 to ``eps_max``: the attacks'
        curve lies between the two (:meth:`robust_accuracy`, :meth:`robust_accuracy_low`)."""
        return [(float(e), self.robust_accuracy(float(e)), self.robust_accuracy_low(float(e)))
                for e in np.linspace(0.0, self.eps_max, n_points)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (numbers as numbers; ``null`` for an infinite eps*). A median or interval end at or
        below ``eps_floor`` means "<= eps_floor" (censored)."""
        lo, hi = self.median_interval()
        clo, chi = self.median_correct_interval()
        n_correct = int(self.clean_correct.sum())
        per_sample: dict[str, Any] = {
            "sample_index": self.sample_index.tolist(),
            "eps_star": [_num(float(v)) for v in self.eps_star],
            "censored": [bool(c) for c in self.censored],
            "found_by": [str(f) for f in self.found_by],
        }
        summary: dict[str, Any] = {
            "search": SEARCH,
            "norm": self.norm,
            "eps_max": self.eps_max,
            "eps_floor": self.eps_floor,
            "attacks": list(self.attacks),
            "probe_draws": self.probe_draws,
            "n_examples": int(len(self.eps_star)),
            "n_correct": n_correct,
            "search_rounds": self.search_rounds,
            "median_eps_star": _num(self.median),
            "median_eps_star_ci95": [_num(lo), _num(hi)],
            "median_eps_star_correct": _num(self.median_correct),
            "median_eps_star_correct_ci95": [_num(clo), _num(chi)],
            "censored": float(self.censored.sum() / n_correct) if n_correct else None,
            "not_fooled_up_to_eps_max": float(np.isinf(self.eps_star).mean()) if len(self.eps_star) else None,
            "curve": [{"eps": e, "robust_acc": a, **({} if low is None else {"robust_acc_low": low})}
                      for e, a, low in self.curve()],
        }
        if self.grid != FLOAT:  # float summaries stay those of every earlier card
            summary["grid"] = self.grid
        if self.survived is not None:  # each image's bracket: (survived, eps_star]
            per_sample["survived"] = [float(v) for v in self.survived]
        if self.certified is not None:
            summary["median_certified_correct"] = _num(float(np.median(self.certified[self.clean_correct])))
            per_sample["certified"] = [float(v) for v in self.certified]
        return {**summary, "per_sample": per_sample}


@dataclass
class _Search:
    """The state of the search over ``n`` images: the smallest example found per image and what found it."""

    hi: np.ndarray  # distance of the smallest verified example so far (inf: none)
    found_by: np.ndarray
    censored: np.ndarray

    def record(self, rows: np.ndarray, dist: np.ndarray, name: str) -> None:
        smaller = dist < self.hi[rows]
        self.hi[rows[smaller]] = dist[smaller]
        self.found_by[rows[smaller]] = name


def check_search(threat_model: str, eps_max: float, eps_floor: float, search_rounds: int, probe_draws: int,
                 grid: str = FLOAT, names: tuple[str, str, str, str] = SEARCH_SETTINGS) -> None:
    """One ValueError naming the first bad search setting, by its caller's ``names`` for eps_max, eps_floor,
    search_rounds and probe_draws; callers run it before any work, so that a bad setting is refused before an
    evaluation whose eps* it would have ended."""
    max_name, floor_name, rounds_name, draws_name = names
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    if grid != FLOAT:
        get_threat_model(threat_model, eps_max, grid)  # Linf only on a grid
        if eps_max < 1 / 255 - 1e-9:
            raise ValueError(f"on the {grid} grid {max_name} must be at least one grey level (1/255), got {eps_max!r}")
    if isinstance(search_rounds, bool) or not isinstance(search_rounds, int) or not 1 <= search_rounds <= 12:
        raise ValueError(f"{rounds_name} must be an integer from 1 to 12, got {search_rounds!r}")
    if isinstance(probe_draws, bool) or not isinstance(probe_draws, int) or probe_draws < 0:
        raise ValueError(f"{draws_name} must be an integer >= 0 (0: no random corners), got {probe_draws!r}")
    try:
        get_threat_model(threat_model, eps_max)  # validates the norm and eps_max
    except ValueError as e:
        raise ValueError(f"{max_name}: {e}") from None
    if isinstance(eps_floor, bool) or not isinstance(eps_floor, int | float) or not 0 < eps_floor < eps_max:
        raise ValueError(f"{floor_name} must be a number in (0, {max_name} = {eps_max:g}), got {eps_floor!r}")


def minimal_perturbation(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] = ("apgd_ce",),
    threat_model: str = "Linf",
    eps_max: float = 16 / 255,
    search_rounds: int = 3,
    eps_floor: float = EPS_FLOOR,
    probe_draws: int = 50,
    store: ResultStore,
    dataset: str = "custom",
    model_name: str = "model",
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    progress: bool = False,
    console: Console | None = None,
    backend: Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
    grid: str = FLOAT,
) -> MinimalPerturbation:
    """eps* of every image: descent from ``eps_max`` to ``eps_floor``, then ``search_rounds`` bisection rounds,
    random sign corners first at every radius (see the module docstring).

    ``search_rounds`` sets the resolution, a factor ``2 ** (1 / 2**search_rounds)`` (3 rounds: 9%); each round
    costs one more run per image. ``probe_draws=0`` leaves the corners out. The keywords of
    :func:`search_eps_star`, with the run's settings one by one.
    """
    settings = RunSettings(dataset=dataset, seed=seed, batch_size=batch_size, device=device,
                           inference=Inference.parse(inference))
    return search_eps_star(model, x, y, indices, attacks=attacks, threat_model=threat_model, eps_max=eps_max,
                           search_rounds=search_rounds, eps_floor=eps_floor, probe_draws=probe_draws, store=store,
                           settings=settings, model_name=model_name, progress=progress, console=console,
                           executor=backend, grid=grid)


def search_eps_star(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] = ("apgd_ce",),
    threat_model: str = "Linf",
    eps_max: float = 16 / 255,
    search_rounds: int = 3,
    eps_floor: float = EPS_FLOOR,
    probe_draws: int = 50,
    store: ResultStore,
    settings: RunSettings,
    model_name: str = "model",
    progress: bool = False,
    console: Console | None = None,
    executor: Executor | None = None,
    grid: str = FLOAT,
) -> MinimalPerturbation:
    """:func:`minimal_perturbation` under a run's ``settings`` (each radius planned with them), its batches computed
    by ``executor`` when given."""
    check_search(threat_model, eps_max, eps_floor, search_rounds, probe_draws, grid)
    attack_objs = [attack_for_target(a, model_name) for a in attacks]
    if not attack_objs:
        raise ValueError("minimal_perturbation needs at least one attack")
    probes: list[Attack] = [RandomCorners(draws=probe_draws)] if probe_draws else []
    indices = torch.arange(len(y)) if indices is None else torch.as_tensor(indices, dtype=torch.int64).cpu()
    n = len(y)
    radii: LogGrid | LevelGrid = (LogGrid(float(eps_max), float(eps_floor), search_rounds) if grid == FLOAT
                                  else LevelGrid(float(eps_max)))
    state = _Search(np.full(n, math.inf), np.full(n, "", dtype=object), np.zeros(n, dtype=bool))

    def run(attack: Attack, eps: float, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(clean correct, robust, distance found) of ``rows`` under ``attack`` at ``eps``, through the store."""
        pick = torch.from_numpy(rows)
        plan = plan_evaluation(model, x[pick], y[pick], indices[pick], attacks=[attack],
                               threat=get_threat_model(threat_model, eps, grid), settings=settings,
                               model_name=model_name, store=store)
        # the notes of every radius's run (the fused path, the reference's corrections) are the evaluation's own
        clean, outcomes, _, _ = execute(plan, progress=progress, checks=False, executor=executor,
                                        console=console if progress else Console(quiet=True))
        out = outcomes[attack.name]
        return clean.clean_correct, out.adv_correct, out.perturbation

    def attack_at(p: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(still robust, misclassified clean) among ``rows`` at radius ``p``: probes first, then each attack on
        the images that are left."""
        left, misclassified = rows, np.zeros(0, dtype=np.int64)
        for attack in probes + attack_objs:
            if len(left) == 0:
                break
            clean_ok, robust, dist = run(attack, radii.radius(p), left)
            misclassified = np.concatenate([misclassified, left[~clean_ok]])
            fooled = clean_ok & ~robust
            state.record(left[fooled], dist[fooled], attack.name)
            left = left[clean_ok & robust]
        return left, misclassified

    clean_correct = np.ones(n, dtype=bool)
    lo = np.full(n, -1)  # grid position of the largest radius at which nothing fooled the image
    nxt = np.full(n, radii.top)  # the descent position each image meets next (-1: done)
    for p in radii.descent_positions():
        rows = np.nonzero(nxt == p)[0]
        if len(rows) == 0:
            continue
        robust, misclassified = attack_at(p, rows)
        clean_correct[misclassified] = False
        nxt[misclassified] = -1
        lo[robust], nxt[robust] = p, -1
        for i in np.setdiff1d(rows, np.concatenate([robust, misclassified])):
            below = radii.descent_below(float(state.hi[i]), p)
            nxt[i] = -1 if below is None else below
            state.censored[i] = below is None and radii.censors
    for _ in range(radii.rounds_needed):
        mids = {i: radii.midpoint(int(lo[i]), float(state.hi[i]))
                for i in np.nonzero((lo >= 0) & np.isfinite(state.hi))[0]}
        todo = {i: m for i, m in mids.items() if m is not None}
        if not todo:
            break
        for m in sorted(set(todo.values()), reverse=True):
            robust, _ = attack_at(m, np.array(sorted(i for i, mm in todo.items() if mm == m), dtype=np.int64))
            lo[robust] = m
    if radii.censors:
        state.censored |= clean_correct & (state.hi <= radii.floor)
    eps_star = np.where(clean_correct, state.hi, 0.0)
    return MinimalPerturbation(
        norm=get_threat_model(threat_model, eps_max).norm,
        eps_max=float(eps_max),
        attacks=tuple(a.name for a in attack_objs),
        sample_index=indices.numpy(),
        eps_star=eps_star,
        search_rounds=search_rounds,
        eps_floor=radii.radius(0),
        probe_draws=probe_draws,
        clean_correct=clean_correct,
        censored=state.censored & clean_correct,
        found_by=np.where(clean_correct, state.found_by, ""),
        grid=grid,
        survived=np.where(clean_correct & (lo >= 0), [radii.radius(int(p)) if p >= 0 else 0.0 for p in lo], 0.0),
    )
