"""Named binary quantizers: an exact forward, a separately chosen surrogate backward.

A BNN's forward pass uses ``sign``, whose derivative is zero almost everywhere. Training (and any gradient
attack) differentiates through a *surrogate* instead. Keeping the two apart lets an attack pick the estimator it
differentiates through (BPDA) without touching the weights, and lets a method preset name its training-time choice.

``sign(0)`` is +1 here, as deployed binary kernels (XNOR/popcount) have no zero.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import nn


def binary_sign(x: torch.Tensor) -> torch.Tensor:
    """Sign with sign(0) = +1: the value a deployed binary kernel computes.

    Written as ``2 * (x >= 0) - 1`` in place: the same values as ``torch.where`` with two constant tensors, about 4x
    faster on CPU, and the sign is a large share of a BNN's inference time (every query of a black-box attack).
    """
    return (x >= 0).to(x.dtype).mul_(2).sub_(1)


# Surrogate *forward* functions whose derivative is the backward of the quantizer.
# Writing the surrogate as a function (rather than its derivative) lets autograd differentiate it,
# so the straight-through trick below needs no custom autograd.Function.
SurrogateFn = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _clipped(x: torch.Tensor) -> torch.Tensor:
    # derivative: 1 on |x| <= 1, else 0 (Hubara et al. 2016)
    return x.clamp(-1.0, 1.0)


def _approx_sign(x: torch.Tensor) -> torch.Tensor:
    # Bi-Real (Liu et al. 2018): piecewise quadratic, derivative 2 - 2|x| on |x| < 1, else 0
    xc = x.clamp(-1.0, 1.0)
    return 2.0 * xc - xc * xc.abs()


def tanh_surrogate(beta: float) -> SurrogateFn:
    """tanh(beta * x): derivative beta * (1 - tanh(beta x)^2), smooth and non-zero everywhere.

    ``beta`` is a temperature: small beta spreads the gradient over all pre-activations (close to ``identity``
    near 0), large beta concentrates it on the units closest to flipping. A smooth sign approximation of this
    kind is the usual BPDA choice for a hard threshold (Athalye et al. 2018).
    """

    def surrogate(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(beta * x)

    return surrogate


def ede_surrogate(t: float) -> SurrogateFn:
    """IR-Net's Error Decay Estimator at temperature ``t``: ``k tanh(t x)`` with ``k = max(1/t, 1)``.

    Early in training (small ``t``) the gradient reaches every weight and activation, like the identity; late in
    training (large ``t``) it approaches the derivative of sign itself (Qin et al., CVPR 2020, eq. 9-10).
    """
    k = max(1.0 / t, 1.0)

    def surrogate(x: torch.Tensor) -> torch.Tensor:
        return k * torch.tanh(t * x)

    return surrogate


SURROGATES: dict[str, SurrogateFn] = {
    "identity": _identity,
    "ste": _clipped,
    "approx_sign": _approx_sign,
    "tanh": tanh_surrogate(1.0),
    "ede": ede_surrogate(10.0),
}

# Surrogate families with one positive parameter, written ``"name:param"`` (``"tanh:5"`` is tanh(5x)), each with
# the parameter its bare name means (``"tanh"`` is ``"tanh:1"``). A spec stays a plain string, so it can be
# assigned to a quantizer, hashed by the store and typed on a CLI.
PARAMETRIC_SURROGATES: dict[str, tuple[Callable[[float], SurrogateFn], float]] = {
    "tanh": (tanh_surrogate, 1.0),
    "ede": (ede_surrogate, 10.0),  # bare "ede" is the end of IR-Net's schedule, t = T_max = 10
}


def _short_float(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _parse_surrogate(spec: object) -> tuple[str, float | None]:
    """``(family, parameter)`` of a surrogate spec, or ValueError naming the known ones."""
    if isinstance(spec, str):
        if spec in SURROGATES:
            return spec, None
        family, sep, arg = spec.partition(":")
        if sep and family in PARAMETRIC_SURROGATES:
            try:
                value = float(arg)
            except ValueError:
                value = math.nan
            if math.isfinite(value) and value > 0:
                return family, value
            raise ValueError(f"surrogate {spec!r}: the parameter after ':' must be a finite number > 0")
    known = sorted(SURROGATES) + [f"{name}:<beta>" for name in sorted(PARAMETRIC_SURROGATES)]
    raise ValueError(f"unknown surrogate {spec!r}; known: {known}")


def canonical_surrogate(spec: str) -> str:
    """One spelling per surrogate (``"tanh:5.0"`` -> ``"tanh:5"``, ``"tanh:1"`` -> ``"tanh"``), for hashing."""
    family, value = _parse_surrogate(spec)
    if value is None:
        return family
    if value == PARAMETRIC_SURROGATES[family][1]:
        return family
    return f"{family}:{_short_float(value)}"


def get_surrogate(spec: str) -> SurrogateFn:
    """The surrogate forward function named by ``spec`` (``"ste"``, ``"tanh"``, ``"tanh:5"``, ...)."""
    if not isinstance(spec, str):
        _parse_surrogate(spec)  # raises the ValueError that names the known surrogates
    return _resolve_surrogate(spec)


def surrogate_family(spec: str) -> str:
    """The family of a surrogate spec: ``"tanh:5"`` -> ``"tanh"``, ``"ste"`` -> ``"ste"``."""
    return _parse_surrogate(spec)[0]


@functools.lru_cache(maxsize=64)  # parsed once per spec, not at every forward pass
def _resolve_surrogate(spec: str) -> SurrogateFn:
    family, value = _parse_surrogate(spec)
    return SURROGATES[family] if value is None else PARAMETRIC_SURROGATES[family][0](value)


def straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value of ``hard`` exactly, gradient of ``soft``.

    Written ``hard + (soft - soft)`` with the second ``soft`` detached: ``s - s`` is exactly 0 for finite ``s``, so
    the forward value is ``hard`` bit for bit (``soft + (hard - soft)`` can be off by a rounding step).
    """
    return hard.detach() + (soft - soft.detach())


class Quantizer(nn.Module):
    """Base of all quantizers; ``name`` is the alias a layer can be given instead of an object.

    Subclasses that set a ``name`` register themselves, so ``get_quantizer("rsign", channels=64)`` works for every
    quantizer of the package without a hand-kept table. Quantizers with per-channel parameters set
    ``per_channel = True`` and take the channel count as their only constructor argument.
    """

    name: str = "quantizer"
    per_channel: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            QUANTIZERS[cls.name] = cls


QUANTIZERS: dict[str, type[Quantizer]] = {}


def get_quantizer(spec: str | Quantizer | None, channels: int | None = None) -> Quantizer | None:
    """Resolve a quantizer given by alias (``"ste_sign"``), object, or ``None`` (full precision).

    ``channels`` is the number of channels the quantizer sees (input channels for an activation quantizer, output
    channels for a kernel quantizer); only quantizers with per-channel parameters use it.
    """
    if spec is None or isinstance(spec, Quantizer):
        return spec
    if isinstance(spec, str) and spec in QUANTIZERS:
        cls = QUANTIZERS[spec]
        if cls.per_channel:
            if channels is None:
                raise ValueError(f"quantizer {spec!r} has per-channel parameters: pass channels=")
            return cls(channels)  # type: ignore[call-arg]
        return cls()
    raise ValueError(f"unknown quantizer {spec!r}; known: {sorted(QUANTIZERS)}")


def set_training_progress(model: nn.Module, progress: float) -> None:
    """Tell every quantizer with a training-time schedule (IR-Net's EDE) how far training is, in [0, 1]."""
    for m in model.modules():
        if isinstance(m, ScheduledSign):
            m.set_progress(progress)


class SignQuantizer(Quantizer):
    """Exact ``sign`` forward; the backward is the derivative of the named ``surrogate``.

    ``surrogate`` is a plain attribute so it can be swapped at attack time (see :func:`use_surrogate`).
    """

    name = "sign"

    def __init__(self, surrogate: str = "ste") -> None:
        super().__init__()
        get_surrogate(surrogate)  # validate now, not at the first backward
        self.surrogate = surrogate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hard = binary_sign(x)
        if not torch.is_grad_enabled() or not x.requires_grad:
            return hard
        return straight_through(hard, get_surrogate(self.surrogate)(x))

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


class ScheduledSign(SignQuantizer):
    """A sign whose surrogate follows a schedule over training (set by :func:`set_training_progress`)."""

    def set_progress(self, progress: float) -> None:
        raise NotImplementedError


class EDESign(ScheduledSign):
    """sign with IR-Net's Error Decay Estimator (Qin et al., CVPR 2020).

    The temperature grows over training as ``t = T_min * 10^(p * log10(T_max / T_min))`` with ``T_min = 0.1``,
    ``T_max = 10`` and ``p`` the fraction of training done. A freshly built quantizer stands at ``p = 1``, the state
    a trained model is deployed (and attacked) in; the training loop rewinds it to ``p = 0`` and advances it.
    """

    name = "ede_sign"
    t_min, t_max = 0.1, 10.0

    def __init__(self) -> None:
        super().__init__("ede")
        self.set_progress(1.0)

    def set_progress(self, progress: float) -> None:
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"training progress must be in [0, 1], got {progress}")
        t = self.t_min * 10 ** (progress * math.log10(self.t_max / self.t_min))
        self.surrogate = canonical_surrogate(f"ede:{t:.6g}")


class RSign(Quantizer):
    """ReActNet's RSign (Liu et al., ECCV 2020): sign(x - alpha_c) with a learnable threshold per channel.

    The backward is Bi-Real's ApproxSign, as in ReActNet; the threshold is learned through it. The inner sign is an
    ordinary :class:`SignQuantizer`, so :func:`use_surrogate` swaps its backward like any other.
    """

    name = "rsign"
    per_channel = True

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.threshold = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.sign = SignQuantizer("approx_sign")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # channels are dim 1 of any input: (N, C, H, W) in a convolution, (N, C) in a linear layer
        return self.sign(x - self.threshold.view(1, -1, *([1] * (x.dim() - 2))))


class use_surrogate:  # noqa: N801 - used like a function: ``with use_surrogate(model, "identity"):``
    """Temporarily set the surrogate backward of every sign quantizer in ``model`` (BPDA at attack time).

    ``surrogate`` is any spec :func:`get_surrogate` accepts (``"identity"``, ``"tanh:5"``, ...). The previous
    surrogates are restored on exit, also when the body raises. The swap mutates the model's quantizers, so two
    threads must not attack the same model object at once.
    """

    def __init__(self, model: nn.Module, surrogate: str) -> None:
        get_surrogate(surrogate)
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
