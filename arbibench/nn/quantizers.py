"""Named binary quantizers: an exact forward, a separately chosen surrogate backward.

A BNN's forward pass uses ``sign``, whose derivative is zero almost everywhere. Training (and any gradient
attack) differentiates through a *surrogate* instead. Keeping the two apart lets an attack pick the estimator it
differentiates through (BPDA) without touching the weights, and lets a method preset name its training-time choice.

``sign(0)`` is +1 here, as deployed binary kernels (XNOR/popcount) have no zero.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def binary_sign(x: torch.Tensor) -> torch.Tensor:
    """Sign with sign(0) = +1: the value a deployed binary kernel computes."""
    return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))


# Surrogate *forward* functions whose derivative is the backward of the quantizer.
# Writing the surrogate as a function (rather than its derivative) lets autograd differentiate it,
# so the straight-through trick below needs no custom autograd.Function.
def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _clipped(x: torch.Tensor) -> torch.Tensor:
    # derivative: 1 on |x| <= 1, else 0 (Hubara et al. 2016)
    return x.clamp(-1.0, 1.0)


def _approx_sign(x: torch.Tensor) -> torch.Tensor:
    # Bi-Real (Liu et al. 2018): piecewise quadratic, derivative 2 - 2|x| on |x| < 1, else 0
    xc = x.clamp(-1.0, 1.0)
    return 2.0 * xc - xc * xc.abs()


SURROGATES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": _identity,
    "ste": _clipped,
    "approx_sign": _approx_sign,
}


def straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value of ``hard``, gradient of ``soft``."""
    return soft + (hard - soft).detach()


class Quantizer(nn.Module):
    """Base of all quantizers; ``name`` is the alias a layer can be given instead of an object."""

    name: str = "quantizer"


class SignQuantizer(Quantizer):
    """Exact ``sign`` forward; the backward is the derivative of the named ``surrogate``.

    ``surrogate`` is a plain attribute so it can be swapped at attack time (see :func:`use_surrogate`).
    """

    name = "sign"

    def __init__(self, surrogate: str = "ste") -> None:
        super().__init__()
        if surrogate not in SURROGATES:
            raise ValueError(f"unknown surrogate {surrogate!r}; known: {sorted(SURROGATES)}")
        self.surrogate = surrogate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hard = binary_sign(x)
        if not torch.is_grad_enabled() or not x.requires_grad:
            return hard
        return straight_through(hard, SURROGATES[self.surrogate](x))

    def extra_repr(self) -> str:
        return f"surrogate={self.surrogate!r}"


class SteSign(SignQuantizer):
    """sign with the clipped straight-through estimator (BinaryNet, Hubara et al. 2016)."""

    name = "ste_sign"

    def __init__(self) -> None:
        super().__init__("ste")


class ApproxSign(SignQuantizer):
    """sign with Bi-Real's piecewise-polynomial derivative (Liu et al. 2018)."""

    name = "approx_sign"

    def __init__(self) -> None:
        super().__init__("approx_sign")


QUANTIZERS: dict[str, type[Quantizer]] = {cls.name: cls for cls in (SteSign, ApproxSign)}


def get_quantizer(spec: str | Quantizer | None) -> Quantizer | None:
    """Resolve a quantizer given by alias (``"ste_sign"``), object, or ``None`` (full precision)."""
    if spec is None or isinstance(spec, Quantizer):
        return spec
    if isinstance(spec, str) and spec in QUANTIZERS:
        return QUANTIZERS[spec]()
    raise ValueError(f"unknown quantizer {spec!r}; known: {sorted(QUANTIZERS)}")


class use_surrogate:  # noqa: N801 - used like a function: ``with use_surrogate(model, "identity"):``
    """Temporarily set the surrogate backward of every sign quantizer in ``model`` (BPDA at attack time)."""

    def __init__(self, model: nn.Module, surrogate: str) -> None:
        if surrogate not in SURROGATES:
            raise ValueError(f"unknown surrogate {surrogate!r}; known: {sorted(SURROGATES)}")
        self.model, self.surrogate = model, surrogate
        self._saved: list[tuple[SignQuantizer, str]] = []

    def __enter__(self) -> nn.Module:
        for m in self.model.modules():
            if isinstance(m, SignQuantizer):
                self._saved.append((m, m.surrogate))
                m.surrogate = self.surrogate
        return self.model

    def __exit__(self, *exc: object) -> None:
        for m, s in self._saved:
            m.surrogate = s
        self._saved.clear()
