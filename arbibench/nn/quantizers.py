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
from typing import Any

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


# One fused autograd.Function per surrogate family: sign in one kernel forward, the surrogate's derivative in one
# expression backward. The chain ``hard + (soft - soft.detach())`` computes the same values with five to eight
# elementwise kernels per call and keeps more tensors alive; a BNN calls its sign twice per binary layer, so the
# chain was a large share of a training step and of every attack's gradient pass. Each backward follows the
# operation order autograd takes through the surrogate's forward function, so gradients match it to rounding.
# ``ctx`` is typed Any: torch's FunctionCtx stub declares neither saved_tensors nor the attributes we store on it.


def _apply(fn: type[torch.autograd.Function], *args: Any) -> torch.Tensor:
    """``fn.apply(*args)``, typed: torch leaves ``Function.apply`` unannotated."""
    out: torch.Tensor = fn.apply(*args)  # type: ignore[no-untyped-call]  # torch: Function.apply has no annotations
    return out


class SteSignFunction(torch.autograd.Function):
    """sign forward; backward ``g * 1{|x| <= 1}`` (the derivative of ``clamp(x, -1, 1)``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return binary_sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad.masked_fill(x.abs() > 1.0, 0.0)


class IdentitySignFunction(torch.autograd.Function):
    """sign forward; the gradient passes unchanged (plain straight-through, BPDA with the identity)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return binary_sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class ApproxSignFunction(torch.autograd.Function):
    """sign forward; backward Bi-Real's ``2 - 2|x|`` on ``|x| <= 1``, else 0."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return binary_sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        xc = x.clamp(-1.0, 1.0)
        out: torch.Tensor = (grad * (2.0 - 2.0 * xc.abs())).masked_fill_(x.abs() > 1.0, 0.0)
        return out


class TanhSignFunction(torch.autograd.Function):
    """sign forward; backward ``beta * (1 - tanh(beta x)^2)``, the derivative of ``tanh(beta x)``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, beta: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.beta = beta
        return binary_sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        y = torch.tanh(ctx.beta * x)
        return grad * (1.0 - y * y) * ctx.beta, None


class EDESignFunction(torch.autograd.Function):
    """sign forward; backward ``k t (1 - tanh(t x)^2)``, IR-Net's EDE (``t`` and ``k`` as floats or 0-d tensors)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        t: float | torch.Tensor,
        k: float | torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.t, ctx.k = t, k
        return binary_sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (x,) = ctx.saved_tensors
        y = torch.tanh(x * ctx.t)
        return grad * ctx.k * (1.0 - y * y) * ctx.t, None, None


SIGN_FUNCTIONS: dict[str, type[torch.autograd.Function]] = {
    "identity": IdentitySignFunction,
    "ste": SteSignFunction,
    "approx_sign": ApproxSignFunction,
    "tanh": TanhSignFunction,
    "ede": EDESignFunction,
}


def _apply_sign(x: torch.Tensor, spec: str) -> torch.Tensor:
    """sign(x) with the backward of surrogate ``spec``, through the family's fused autograd.Function."""
    family, value = _parse_surrogate_cached(spec)
    if family == "tanh":
        return _apply(TanhSignFunction, x, PARAMETRIC_SURROGATES["tanh"][1] if value is None else value)
    if family == "ede":
        t = PARAMETRIC_SURROGATES["ede"][1] if value is None else value
        return _apply(EDESignFunction, x, t, max(1.0 / t, 1.0))
    return _apply(SIGN_FUNCTIONS[family], x)


_reference_chain_depth = 0


class reference_surrogates:  # noqa: N801 - used like a function: ``with reference_surrogates():``
    """Run every sign quantizer through the unfused chain ``hard + (s(x) - s(x).detach())`` with ``s`` the
    surrogate's forward function from :data:`SURROGATES`: the executable definition the fused functions are tested
    against, and the "before" of ``benchmarks/train_throughput.py``. Process-wide while the block runs."""

    def __enter__(self) -> None:
        global _reference_chain_depth
        _reference_chain_depth += 1

    def __exit__(self, *exc: object) -> None:
        global _reference_chain_depth
        _reference_chain_depth -= 1


@functools.lru_cache(maxsize=64)
def _parse_surrogate_cached(spec: str) -> tuple[str, float | None]:
    return _parse_surrogate(spec)


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
            return cls(channels)
        return cls()
    raise ValueError(f"unknown quantizer {spec!r}; known: {sorted(QUANTIZERS)}")


def set_training_progress(model: nn.Module, progress: float) -> None:
    """Tell every quantizer with a training-time schedule (IR-Net's EDE) how far training is, in [0, 1]."""
    for m in model.modules():
        if isinstance(m, ScheduledSign):
            m.set_progress(progress)


class SignQuantizer(Quantizer):
    """Exact ``sign`` forward; the backward is the derivative of the named ``surrogate``.

    ``surrogate`` is a plain attribute so it can be swapped at attack time (see :func:`use_surrogate`). The pass
    runs through one fused :class:`torch.autograd.Function` per surrogate family (:data:`SIGN_FUNCTIONS`); the
    surrogate's forward function in :data:`SURROGATES` is the mathematical definition that the fused backward
    is tested against.
    """

    name = "sign"

    def __init__(self, surrogate: str = "ste") -> None:
        super().__init__()
        get_surrogate(surrogate)  # validate now, not at the first backward
        self.surrogate = surrogate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not x.requires_grad:
            return binary_sign(x)
        if _reference_chain_depth:
            return straight_through(binary_sign(x), get_surrogate(self.surrogate)(x))
        return _apply_sign(x, self.surrogate)

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

    ``t`` lives in a (non-persistent) tensor buffer that the schedule updates in place, so the autograd graph, and
    a compiled one, stays the same from epoch to epoch; ``surrogate`` names the same value as a spec string
    (``"ede:0.1"``) for hashing and for :func:`use_surrogate`.
    """

    name = "ede_sign"
    temperature: torch.Tensor  # buffers (t and k), declared so that type checkers see tensors
    scale: torch.Tensor
    t_min, t_max = 0.1, 10.0

    def __init__(self) -> None:
        super().__init__("ede")
        self.register_buffer("temperature", torch.tensor(self.t_max), persistent=False)
        self.register_buffer("scale", torch.tensor(1.0), persistent=False)
        self.set_progress(1.0)

    def set_progress(self, progress: float) -> None:
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"training progress must be in [0, 1], got {progress}")
        t = self.t_min * 10 ** (progress * math.log10(self.t_max / self.t_min))
        self.surrogate = self._scheduled = canonical_surrogate(f"ede:{t:.6g}")
        t = PARAMETRIC_SURROGATES["ede"][1] if self._scheduled == "ede" else float(f"{t:.6g}")
        self.temperature.fill_(t)
        self.scale.fill_(max(1.0 / t, 1.0))  # k, computed in double as the spec path does

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # inference, a surrogate swapped in by use_surrogate, or the reference chain (the spec names the same t)
        if (
            self.surrogate != self._scheduled
            or not torch.is_grad_enabled()
            or not x.requires_grad
            or _reference_chain_depth
        ):
            return super().forward(x)
        return _apply(EDESignFunction, x, self.temperature, self.scale)


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
        out: torch.Tensor = self.sign(x - self.threshold.view(1, -1, *([1] * (x.dim() - 2))))
        return out


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
