"""Threat geometry: one object per norm that every attack uses, so no attack re-implements a projection.

A threat model is the set of allowed adversarial inputs: images in [0, 1] within ``eps`` of the original in some
norm. It supplies the four pieces of geometry a gradient attack needs (``distance``, ``project``, ``random_start``,
``step_direction``) and the check that decides whether a result may be counted at all (``verify``).

A threat model also names the input ``grid``: ``float`` (any real pixel value, as always) or ``uint8``, the 8-bit
images a camera, a PNG file and a deployed network's first layer see. On ``uint8`` every allowed input lies on the
k/255 grid: ``project`` rounds onto it without leaving the eps box, so every attack that projects stays on it, and
``verify`` refuses a pixel off it as it refuses one beyond eps.

All methods are per sample: the batch dimension comes first and every other dimension is flattened into one vector.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

# L2 projections aim slightly inside the ball: float32 rounding when the scaled perturbation is added back to x
# can push the true distance a hair over eps, and verify() must never reject what project() produced.
_L2_RADIUS_MARGIN = 1e-5

#: The input grids: real-valued pixels, or 8-bit pixels k/255.
FLOAT, UINT8 = "float", "uint8"
GRIDS = (FLOAT, UINT8)
_GRID_LEVELS = {UINT8: 255}
# How far (in grid levels) a float32 pixel k/255 may sit from k after widening and scaling: a few float32 ulps.
_GRID_TOL = 1e-3
# Slack when counting the whole levels eps spans, so that eps = 8/255 written in float allows exactly 8 levels.
_LEVEL_SLACK = 1e-6


class ThreatModelViolation(ValueError):  # noqa: N818 - the field's word for it; the public API name
    """An adversarial batch left the threat model (too far, outside [0, 1], off its grid or non-finite): never count
    it."""


def _per_sample(t: torch.Tensor) -> torch.Tensor:
    """View a batch as [N, D] so norms are taken per sample whatever the image shape."""
    return t.reshape(t.shape[0], -1)


def _check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(
            f"generator must be a CPU torch.Generator (got one on {generator.device}): random draws are made on CPU "
            "and moved to the data's device, so results do not depend on the accelerator."
        )


@dataclass(frozen=True)
class ThreatModel(ABC):
    """An eps-ball in one norm, intersected with the image box [0, 1] and, on ``grid="uint8"``, with the k/255 grid."""

    eps: float
    grid: str = FLOAT
    norm: ClassVar[str] = ""
    max_eps: ClassVar[float] = math.inf

    def __post_init__(self) -> None:
        eps = self.eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            hint = " (use parse_eps for strings such as '8/255')" if isinstance(eps, str) else ""
            raise ValueError(f"{self.norm} eps must be a number, got {eps!r}{hint}")
        eps = float(eps)
        if not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"{self.norm} eps must be finite and > 0, got {eps!r}")
        if eps > self.max_eps:
            raise ValueError(
                f"{self.norm} eps={eps} exceeds {self.max_eps}: pixels live in [0, 1], so a larger budget allows "
                "any image at all. Did you mean eps/255 (e.g. '8/255')?"
            )
        object.__setattr__(self, "eps", eps)
        if self.grid not in GRIDS:
            raise ValueError(f"grid must be one of {', '.join(GRIDS)}, got {self.grid!r}")
        if self.grid != FLOAT and self.norm != "Linf":
            raise ValueError(
                f"grid {self.grid!r} is defined for the Linf threat model only (an {self.norm} step spread over every "
                "pixel is far below one grey level); use Linf, or grid 'float'"
            )
        levels = _GRID_LEVELS.get(self.grid)
        if levels is not None and math.floor(eps * levels + _LEVEL_SLACK) < 1:
            raise ValueError(
                f"eps={eps:.4g} is below one grey level (1/{levels}) on the {self.grid} grid, where no image but the "
                f"clean one lies within it (ACC* would equal ACC by construction); use eps >= 1/{levels}, or grid "
                "'float'"
            )

    @property
    def levels(self) -> int | None:
        """Grid levels above 0 (255 on ``uint8``: pixels k/255); None for float pixels."""
        return _GRID_LEVELS.get(self.grid)

    @property
    def min_step(self) -> float:
        """The shortest step an iterative attack should take: 0 in float, one level on a grid (a shorter step from a
        grid point is rounded back onto it, so the attack would never move)."""
        return 0.0 if self.levels is None else 1.0 / self.levels

    @abstractmethod
    def distance(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-sample norm of ``x_adv - x``, shape [N]."""

    @abstractmethod
    def project_ball(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Closest-enough point of the eps-ball around ``x`` intersected with [0, 1] (float pixels)."""

    def project(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Closest-enough point of the threat model: the eps-ball around ``x`` in [0, 1], then onto the grid."""
        return self.round_to_grid(self.project_ball(x_adv, x), x)

    def round_to_grid(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``x_adv`` with every pixel rounded to the nearest grid level that stays within eps of ``x`` and in [0, 1]
        (``x`` itself on the grid); unchanged on float pixels.

        The box is counted in whole levels (``floor(eps * 255)``, at least one: a grid threat model refuses less),
        so rounding never leaves it."""
        n = self.levels
        if n is None:
            return x_adv
        reach = math.floor(self.eps * n + _LEVEL_SLACK)
        base = torch.round(x * n)
        k = torch.round(x_adv * n)
        k = torch.minimum(torch.maximum(k, base - reach), base + reach).clamp(0, n)
        return (k / n).to(x_adv.dtype)

    def on_grid(self, x: torch.Tensor) -> torch.Tensor:
        """Per sample, whether every pixel of ``x`` lies on the grid (always True on float pixels); shape [N]."""
        n = self.levels
        if n is None:
            return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        scaled = _per_sample(x.detach().double()) * n
        return ((scaled - torch.round(scaled)).abs() <= _GRID_TOL).all(dim=1)

    @abstractmethod
    def random_start(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """A random point of the eps-ball around ``x`` (inside [0, 1]), drawn from a CPU ``generator``."""

    @abstractmethod
    def step_direction(self, grad: torch.Tensor) -> torch.Tensor:
        """Steepest-ascent direction of unit size in this norm's dual sense (zero where the gradient is zero)."""

    def verify(self, x_adv: torch.Tensor, x: torch.Tensor, tol: float = 1e-6) -> None:
        """Raise :class:`ThreatModelViolation` unless every sample is finite, in [0, 1], within eps (+ tol) and on
        the grid.

        Distances are measured in float64 on CPU so that the check itself adds no rounding of its own.
        """
        if not isinstance(x_adv, torch.Tensor):
            raise ThreatModelViolation(f"adversarial batch must be a tensor, got {type(x_adv).__name__}")
        if x_adv.shape != x.shape:
            raise ThreatModelViolation(
                f"adversarial batch has shape {tuple(x_adv.shape)}, originals have {tuple(x.shape)}"
            )
        n = x.shape[0]
        if n == 0:
            return
        a = _per_sample(x_adv.detach().cpu().double())
        o = _per_sample(x.detach().cpu().double())
        nonfinite = ~torch.isfinite(a).all(dim=1)
        a_safe = torch.where(torch.isfinite(a), a, o)
        out_of_box = ((a_safe < -tol) | (a_safe > 1.0 + tol)).any(dim=1) & ~nonfinite
        dist = self.distance(a_safe, o)
        too_far = (dist > self.eps + tol) & ~nonfinite
        off_grid = ~self.on_grid(a_safe) & ~nonfinite
        bad = nonfinite | out_of_box | too_far | off_grid
        n_bad = int(bad.sum())
        if n_bad == 0:
            return
        worst = float(dist[~nonfinite].max()) if bool((~nonfinite).any()) else math.nan
        lo = float(a_safe.min())
        hi = float(a_safe.max())
        grid = f", {int(off_grid.sum())} off the {self.grid} grid" if self.levels is not None else ""
        raise ThreatModelViolation(
            f"{n_bad} of {n} samples violate the {self.norm} threat model with eps={self.eps:.6g} (tol {tol:g}): "
            f"{int(nonfinite.sum())} non-finite, {int(out_of_box.sum())} outside [0, 1] (values span "
            f"[{lo:.6g}, {hi:.6g}]), {int(too_far.sum())} farther than eps{grid}; worst {self.norm} distance "
            f"{worst:.6g}."
        )


@dataclass(frozen=True)
class Linf(ThreatModel):
    """L-infinity ball: every pixel may move by at most eps."""

    norm: ClassVar[str] = "Linf"
    max_eps: ClassVar[float] = 1.0

    def distance(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return _per_sample(x_adv - x).abs().amax(dim=1)

    def project_ball(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # Clamping to the box after the ball only moves pixels towards x (which lies in [0, 1]): stays in the ball.
        return torch.minimum(torch.maximum(x_adv, x - self.eps), x + self.eps).clamp(0.0, 1.0)

    def random_start(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        _check_generator(generator)
        u = torch.rand(x.shape, generator=generator, dtype=torch.float32)
        delta = ((2.0 * u - 1.0) * self.eps).to(device=x.device, dtype=x.dtype)
        return self.project(x + delta, x)

    def step_direction(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.sign(grad)


@dataclass(frozen=True)
class L2(ThreatModel):
    """L2 ball: the Euclidean norm of the whole perturbation is at most eps."""

    norm: ClassVar[str] = "L2"

    def distance(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        norms: torch.Tensor = torch.linalg.vector_norm(_per_sample(x_adv - x), dim=1)
        return norms

    def project_ball(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        delta = x_adv - x
        norms = self.distance(x_adv, x)
        radius = self.eps * (1.0 - _L2_RADIUS_MARGIN)
        scale = torch.where(norms > radius, radius / norms.clamp_min(1e-30), torch.ones_like(norms))
        scale = scale.view(-1, *([1] * (x.dim() - 1)))
        # Clipping to [0, 1] afterwards moves each pixel towards x, so it can only shrink the L2 norm.
        return (x + delta * scale).clamp(0.0, 1.0)

    def random_start(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        _check_generator(generator)
        n, d = x.shape[0], x[0].numel()
        # Uniform in the ball: an isotropic Gaussian direction and a radius eps * u^(1/d).
        direction = torch.randn((n, d), generator=generator, dtype=torch.float64)
        direction = direction / torch.linalg.vector_norm(direction, dim=1, keepdim=True).clamp_min(1e-30)
        radius = self.eps * torch.rand((n, 1), generator=generator, dtype=torch.float64) ** (1.0 / d)
        delta = (direction * radius).reshape(x.shape).to(device=x.device, dtype=x.dtype)
        return self.project(x + delta, x)

    def step_direction(self, grad: torch.Tensor) -> torch.Tensor:
        g = _per_sample(grad)
        # Divide by the largest entry first so that tiny (subnormal) or huge gradients do not under/overflow the norm.
        peak = g.abs().amax(dim=1, keepdim=True)
        g = torch.where(peak > 0, g / peak.clamp_min(torch.finfo(g.dtype).tiny), torch.zeros_like(g))
        norms = torch.linalg.vector_norm(g, dim=1, keepdim=True)
        g = torch.where(norms > 0, g / norms.clamp_min(1e-30), g)
        return g.reshape(grad.shape)


THREAT_MODELS: dict[str, type[ThreatModel]] = {"linf": Linf, "l2": L2}


def get_threat_model(name: str, eps: float, grid: str = FLOAT) -> ThreatModel:
    """Threat model by norm name ("Linf", "L2", any case) on the input ``grid`` ("float" or "uint8")."""
    cls = THREAT_MODELS.get(str(name).lower())
    if cls is None:
        known = ", ".join(c.norm for c in THREAT_MODELS.values())
        raise ValueError(f"unknown threat model {name!r}; known: {known}")
    return cls(eps, grid)


def parse_eps(text: str) -> float:
    """An eps written as a decimal ("0.031") or a fraction of pixel levels ("8/255"), as papers write it."""
    unreadable = f"cannot read eps {text!r}: write a positive number such as '0.5' or a fraction such as '8/255'"
    parts = str(text).strip().split("/")
    if len(parts) > 2:
        raise ValueError(unreadable)
    try:
        numbers = [float(p) for p in parts]
    except ValueError as e:
        raise ValueError(unreadable) from e
    if len(numbers) == 2 and numbers[1] == 0:
        raise ValueError(f"eps {text!r} divides by zero")
    value = numbers[0] / numbers[1] if len(numbers) == 2 else numbers[0]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"eps {text!r} = {value} must be finite and > 0")
    return value
