"""The certified lower end of eps*: per image, the largest Linf radius at which no input is misclassified.

At one radius an image is *verified* (the branch-and-bound of :mod:`arbibench.verify.branch` proved every input
of the box classified correctly), *falsified* (a counterexample was found, replayed through the model and checked
against the threat model with no tolerance, like every adversarial example arbibench counts) or *unknown* (neither
within the node budget). Cheap probes run first: the corner the loss gradient points to and random sign corners,
which find the tiny-radius examples of sign networks. The certified radius is found by bisection in log space
between ``radius_min`` and ``radius_max``; with the smallest radius at which a counterexample was found it brackets
the image's true eps*: ``certified <= eps* <= attacked``.

The bounds are sound for the chosen semantics (:mod:`arbibench.verify.network`); counterexamples are replayed
through ``model`` itself.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks.base import loss_gradient, predict
from arbibench.attacks.threat import Linf
from arbibench.deploy.semantics import DEPLOYED
from arbibench.verify.branch import branch_and_bound
from arbibench.verify.network import NetworkBounds

VERIFIED, FALSIFIED, UNKNOWN = "verified", "falsified", "unknown"
RADIUS_MIN, RADIUS_MAX = 1e-4 / 255, 1e-2 / 255


@dataclass(frozen=True)
class Verdict:
    """One image at one radius: the status, branch-and-bound nodes spent, undecided signs at the root, seconds."""

    radius: float
    status: str
    nodes: int
    undecided: int
    seconds: float


@dataclass(frozen=True)
class ImageCertificate:
    """One image: its eps* bracket ``[certified, attacked]`` and every radius tried.

    ``certified`` is 0 where no radius tried was verified (below ``radius_min``, or a misclassified image);
    ``attacked`` is the smallest radius with a replayed counterexample, ``inf`` where none was found (0 for a
    misclassified image), and ``counterexample`` that input.
    """

    index: int
    label: int
    correct: bool
    certified: float
    attacked: float
    verdicts: tuple[Verdict, ...]
    seconds: float
    counterexample: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "label": self.label, "correct": self.correct, "certified": self.certified,
            "attacked": None if math.isinf(self.attacked) else self.attacked, "seconds": round(self.seconds, 3),
            "verdicts": [{"radius": v.radius, "status": v.status, "nodes": v.nodes, "undecided": v.undecided,
                          "seconds": round(v.seconds, 3)} for v in self.verdicts],
        }


@dataclass(frozen=True)
class CertificationResult:
    """Every image's certificate, with the settings that produced them."""

    semantics: str
    radius_min: float
    radius_max: float
    steps: int
    max_nodes: int
    corners: int
    images: tuple[ImageCertificate, ...]

    @property
    def correct(self) -> list[ImageCertificate]:
        return [c for c in self.images if c.correct]

    def median_bracket(self) -> tuple[float, float]:
        """``(median certified, median attacked)`` over the correctly classified images: the median eps* lies
        between them (a median is monotone); ``attacked`` is ``inf`` when fewer than half were falsified."""
        correct = self.correct
        if not correct:
            return 0.0, 0.0
        return statistics.median(c.certified for c in correct), statistics.median(c.attacked for c in correct)

    def censoring(self, image: ImageCertificate) -> str | None:
        """``"below"``: no radius tried was verified (eps* may still exceed 0); ``"above"``: ``radius_max`` was
        verified (eps* may be larger); None: the bracket's lower end is a bisection result."""
        if not image.correct:
            return None
        if image.certified == 0:
            return "below"
        return "above" if image.certified >= self.radius_max else None

    def to_dict(self) -> dict[str, Any]:
        lower, upper = self.median_bracket()
        return {
            "semantics": self.semantics, "radius_min": self.radius_min, "radius_max": self.radius_max,
            "steps": self.steps, "max_nodes": self.max_nodes, "corners": self.corners,
            "images": len(self.images), "correct": len(self.correct),
            "median_certified": lower, "median_attacked": None if math.isinf(upper) else upper,
            "per_image": [{**c.to_dict(), "certified_censored": self.censoring(c)} for c in self.images],
        }


def corner(x: torch.Tensor, radius: float, signs: torch.Tensor) -> torch.Tensor:
    """``x + radius * signs`` clipped to [0, 1], rounded to float32 and stepped back towards ``x`` wherever the
    rounding left the Linf ball: the threat model's check then passes with no tolerance."""
    x64 = x.double()
    adv = (x64 + radius * signs.double()).clamp(0.0, 1.0).to(x.dtype)
    outside = (adv.double() - x64).abs() > radius
    return torch.where(outside, torch.nextafter(adv, x), adv)


def replayed(model: nn.Module, x: torch.Tensor, label: int, candidates: torch.Tensor,
             radius: float) -> torch.Tensor | None:
    """The first candidate the model misclassifies and that lies in the threat model, checked with no tolerance."""
    y = torch.full((candidates.shape[0],), label, dtype=torch.long, device=candidates.device)
    fooled = (predict(model, candidates) != y).nonzero().flatten()
    if fooled.numel() == 0:
        return None
    found = candidates[int(fooled[0])].unsqueeze(0)
    Linf(radius).verify(found, x, tol=0.0)
    return found if int(predict(model, found)[0]) != label else None


def probe(model: nn.Module, x: torch.Tensor, label: int, radius: float, corners: int,
          generator: torch.Generator) -> torch.Tensor | None:
    """A counterexample at ``radius`` from the gradient's corner and ``corners`` random sign corners, or None."""
    y = torch.tensor([label], device=x.device)
    grad, _ = loss_gradient(model, x, y, lambda logits, t: F.cross_entropy(logits, t, reduction="none"))
    signs = [torch.where(grad >= 0, 1.0, -1.0)]
    if corners:
        draws = torch.randint(0, 2, (corners, *x.shape[1:]), generator=generator).to(x.device)
        signs.append(draws.to(x.dtype) * 2 - 1)
    candidates = corner(x.expand(1 + corners, *x.shape[1:]), radius, torch.cat(signs))
    for start in range(0, candidates.shape[0], 64):
        found = replayed(model, x, label, candidates[start : start + 64], radius)
        if found is not None:
            return found
    return None


def verdict(bounds: NetworkBounds, model: nn.Module, x: torch.Tensor, label: int, radius: float, max_nodes: int,
            corners: int, generator: torch.Generator) -> tuple[Verdict, torch.Tensor | None]:
    """The status of one image (batch of 1, float32) at one radius, and the counterexample if falsified."""
    start = time.perf_counter()
    found = probe(model, x, label, radius, corners, generator)
    if found is not None:
        return Verdict(radius, FALSIFIED, 0, -1, time.perf_counter() - start), found
    x64 = x.double()
    lo = torch.nextafter((x64 - radius).clamp(0.0, 1.0), torch.tensor(-math.inf, dtype=torch.float64))
    hi = torch.nextafter((x64 + radius).clamp(0.0, 1.0), torch.tensor(math.inf, dtype=torch.float64))
    search = branch_and_bound(bounds, lo, hi, label, max_nodes)
    status = VERIFIED if search.proven else UNKNOWN
    return Verdict(radius, status, search.nodes, search.undecided, time.perf_counter() - start), None


def certify_image(bounds: NetworkBounds, model: nn.Module, x: torch.Tensor, label: int, index: int, *,
                  radius_min: float, radius_max: float, steps: int, max_nodes: int, corners: int,
                  generator: torch.Generator) -> ImageCertificate:
    """One image's bracket: ``radius_min``, then ``radius_max``, then ``steps`` bisections in log space."""
    start = time.perf_counter()
    if int(predict(model, x)[0]) != label:
        return ImageCertificate(index, label, False, 0.0, 0.0, (), time.perf_counter() - start, x.clone())
    verdicts: list[Verdict] = []
    certified, attacked, example = 0.0, math.inf, None

    def attempt(radius: float) -> bool:
        nonlocal certified, attacked, example
        v, found = verdict(bounds, model, x, label, radius, max_nodes, corners, generator)
        verdicts.append(v)
        if v.status == VERIFIED:
            certified = max(certified, radius)
        if found is not None and radius < attacked:
            attacked, example = radius, found
        return v.status == VERIFIED

    if attempt(radius_min) and radius_max > radius_min and not attempt(radius_max):
        lo, hi = radius_min, radius_max
        for _ in range(steps):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if attempt(mid) else (lo, mid)
    return ImageCertificate(index, label, True, certified, attacked, tuple(verdicts), time.perf_counter() - start,
                            example)


def check_search(radius_min: float, radius_max: float, steps: int, max_nodes: int, corners: int) -> None:
    """One ValueError naming the bad setting of a radius search, before any model or data is loaded."""
    if not (0 < radius_min <= radius_max <= 1):
        raise ValueError(f"radii must satisfy 0 < radius_min <= radius_max <= 1, got {radius_min:g} and "
                         f"{radius_max:g}: pass them as fractions of the pixel range, e.g. 1e-4/255")
    for name, value, least in (("steps (--steps)", steps, 0), ("max_nodes (--nodes)", max_nodes, 1),
                               ("corners (--corners)", corners, 0)):
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")


def _check_inputs(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.dim() != 4 or y.shape != (x.shape[0],):
        raise ValueError(f"x must be a batch of images (N, C, H, W) and y one label each; got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if bool((x < 0).any() or (x > 1).any()):
        raise ValueError("images must lie in [0, 1] (arbibench's models normalise inside)")


def image_generator(seed: int, index: int) -> torch.Generator:
    """The random corners' generator of the image at dataset position ``index``: its own, so an image's verdicts do
    not depend on which images were certified before it (a run resumed from stored certificates equals one that
    was never interrupted)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def certify(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, radius_min: float = RADIUS_MIN,
            radius_max: float = RADIUS_MAX, steps: int = 5, max_nodes: int = 256, corners: int = 50,
            semantics: str = DEPLOYED, indices: torch.Tensor | None = None, seed: int = 0,
            device: str | torch.device | None = None,
            on_image: Callable[[ImageCertificate], None] | None = None) -> CertificationResult:
    """Certified Linf radii of ``model`` (eval mode) on images ``x`` in [0, 1] with labels ``y``.

    Per image: the largest radius in ``[radius_min, radius_max]`` that the bounds verify (``steps`` bisections),
    the smallest at which a counterexample was found and replayed, and the seconds. ``max_nodes`` bounds each
    branch-and-bound; ``corners`` random sign corners are tried first at every radius; ``semantics`` is
    ``"deployed"`` (the bit-packed network) or ``"simulation"`` (the float model). ``on_image`` is called with each
    certificate as it is done.
    """
    check_search(radius_min, radius_max, steps, max_nodes, corners)
    _check_inputs(x, y)
    bounds = NetworkBounds(model, semantics, device)
    where = bounds.device
    images = []
    for i in range(x.shape[0]):
        index = int(indices[i]) if indices is not None else i
        cert = certify_image(bounds, model, x[i : i + 1].to(where), int(y[i]), index, radius_min=radius_min,
                             radius_max=radius_max, steps=steps, max_nodes=max_nodes, corners=corners,
                             generator=image_generator(seed, index))
        images.append(cert)
        if on_image is not None:
            on_image(cert)
    return CertificationResult(semantics, radius_min, radius_max, steps, max_nodes, corners, tuple(images))
