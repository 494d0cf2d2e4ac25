"""BNN gradient estimators: which backward an attack differentiates through, and how its loss sees the logits.

A binarized network's forward pass is piecewise constant in its input (``sign`` has zero derivative almost
everywhere), so an attack that differentiates the deployed function gets no signal and overstates robustness.
BPDA (Athalye et al., ICML 2018) replaces the hard function by a differentiable approximation in the backward pass
only; here that is the surrogate of every :class:`~arbibench.nn.quantizers.SignQuantizer`, swapped at attack time.

Over-confident BNNs add a second kind of masking: the softmax saturates, cross-entropy gradients round to zero
and a gradient attack stalls although the model is not robust. Gupta & Ajanthan ("Improved Gradient-Based
Adversarial Attacks for Quantized Networks", AAAI 2022) show that rescaling the logits before the loss (a
temperature) restores useful gradients. :class:`GradientEstimator` carries both choices; :func:`apply_estimator`
applies them; :class:`EstimatedAttack` runs any attack under one estimator; :class:`AdaptiveAttack` runs one
attack under several and keeps each sample's worst case.

Neither choice changes what is attacked: the forward values of the model are exact whatever the surrogate, and
dividing logits by a positive temperature keeps their order, so success is still decided by the deployed model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from arbibench.attacks.base import Attack, AttackOutput, predict
from arbibench.attacks.threat import ThreatModel
from arbibench.nn.quantizers import SignQuantizer, canonical_surrogate, use_surrogate


def _short_float(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class GradientEstimator:
    """How an attack computes its gradients on a BNN.

    ``surrogate``: the backward of every sign quantizer during the attack (``"ste"``, ``"identity"``,
    ``"approx_sign"``, ``"tanh"``, ``"tanh:<beta>"``; see :mod:`arbibench.nn.quantizers`); ``None`` keeps each
    quantizer's training-time surrogate. Stored in canonical spelling (``"tanh:5.0"`` becomes ``"tanh:5"``) so
    equal estimators hash equally.

    ``logit_temperature`` T: the attack's loss sees ``logits / T`` (Gupta & Ajanthan, AAAI 2022). T > 1 un-saturates
    the softmax of over-confident models, whose cross-entropy gradient otherwise rounds to zero. It only matters for
    losses that are not scale-equivariant (cross-entropy); with the margin or DLR loss and a sign/normalised step
    the attack is the same for every T. Powers of two divide exactly, so the logits' order is kept bit for bit.
    """

    surrogate: str | None = None
    logit_temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.surrogate is not None:
            object.__setattr__(self, "surrogate", canonical_surrogate(self.surrogate))
        t = self.logit_temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"logit_temperature must be a finite number > 0, got {t!r}")
        object.__setattr__(self, "logit_temperature", float(t))

    @property
    def tag(self) -> str:
        """Short, unique, parseable name: ``"identity"``, ``"tanh:5,T=16"``, ``"native"`` (training surrogate)."""
        base = self.surrogate or "native"
        return base if self.logit_temperature == 1.0 else f"{base},T={_short_float(self.logit_temperature)}"

    @classmethod
    def parse(cls, text: str | GradientEstimator | None) -> GradientEstimator:
        """Inverse of :attr:`tag` (also accepts an estimator or ``None``, meaning the native estimator)."""
        if text is None:
            return cls()
        if isinstance(text, GradientEstimator):
            return text
        if not isinstance(text, str):
            raise ValueError(f"an estimator is a GradientEstimator or a tag such as 'tanh:5,T=16', got {text!r}")
        base, sep, temp = text.strip().partition(",")
        temperature = 1.0
        if sep:
            key, eq, value = temp.partition("=")
            if key.strip() != "T" or not eq:
                raise ValueError(f"cannot read estimator {text!r}: write e.g. 'identity' or 'identity,T=16'")
            try:
                temperature = float(value)
            except ValueError as e:
                raise ValueError(f"cannot read the temperature of estimator {text!r}") from e
        base = base.strip()
        return cls(None if base in ("", "native") else base, temperature)


class LogitTemperature(nn.Module):
    """``model(x) / T``: what the attack's loss sees under a logit temperature.

    Dividing by a positive T keeps the logits' order, so ``argmax`` (every success check) is unchanged, up to ties
    created by rounding when two logits differ in their last bits; with T a power of two the division is exact
    and no tie can appear. The runner re-checks every result on the unscaled model anyway.
    """

    def __init__(self, model: nn.Module, temperature: float) -> None:
        super().__init__()
        self.model = model
        self.temperature = float(temperature)
        # Wrapping must not put anything in training mode: the attack contract checks every submodule.
        self.training = bool(getattr(model, "training", False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(x)
        return logits / self.temperature

    def extra_repr(self) -> str:
        return f"temperature={self.temperature:g}"


@contextmanager
def apply_estimator(model: nn.Module, estimator: GradientEstimator | str | None) -> Iterator[nn.Module]:
    """Within the block, the yielded model differentiates through ``estimator``.

    Its sign quantizers use the estimator's surrogate (the previous ones come back on exit, also after an
    exception) and its logits are divided by the estimator's temperature; forward values of the model itself are
    unchanged. With the native surrogate and T = 1 the model itself is yielded. A model that is not an
    ``nn.Module`` (a bare callable) has no quantizers to swap; only the temperature applies to it.
    """
    est = GradientEstimator.parse(estimator)
    swap = est.surrogate is not None and isinstance(model, nn.Module)
    with use_surrogate(model, est.surrogate) if swap else nullcontext(model):  # type: ignore[arg-type]
        yield model if est.logit_temperature == 1.0 else LogitTemperature(model, est.logit_temperature)


def effective_estimator(model: nn.Module, estimator: GradientEstimator) -> tuple[tuple[str, ...], float]:
    """What ``estimator`` actually does to ``model``: the surrogate each quantizer would use, and T.

    Two estimators with the same effect give the same attack (e.g. ``"ste"`` and the native estimator on a model
    trained with the STE, or any two surrogates on a full-precision model), so :class:`AdaptiveAttack` runs one.
    """
    quantizers = [m for m in model.modules() if isinstance(m, SignQuantizer)] if isinstance(model, nn.Module) else []
    per_layer = tuple(estimator.surrogate or canonical_surrogate(q.surrogate) for q in quantizers)
    return per_layer, estimator.logit_temperature


# -- attacks under an estimator ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EstimatedAttackConfig:
    estimator: GradientEstimator = field(default_factory=GradientEstimator)


class EstimatedAttack(Attack):
    """Any attack, run under one :class:`GradientEstimator`; named ``"<attack>@<estimator tag>"``.

    ``EstimatedAttack(PGD(steps=20), "identity")`` is ``pgd@identity``. Its :meth:`config_dict` holds the inner
    attack's config and the estimator, so the store keeps a result per (attack, estimator).
    """

    name = "estimated"
    Config = EstimatedAttackConfig
    config: EstimatedAttackConfig

    def __init__(self, attack: Attack, estimator: GradientEstimator | str | None = None) -> None:
        if not isinstance(attack, Attack):
            raise TypeError(f"attack must be a configured Attack, got {type(attack).__name__}")
        est = GradientEstimator.parse(estimator)
        self.attack = attack
        self.config = EstimatedAttackConfig(est)
        self.name = f"{attack.name}@{est.tag}"  # type: ignore[misc]
        self.needs_gradients = attack.needs_gradients  # type: ignore[misc]
        self.family, self.norms = attack.family, attack.norms  # type: ignore[misc]
        self.reports_min_distance = attack.reports_min_distance  # type: ignore[misc]

    @property
    def estimator(self) -> GradientEstimator:
        return self.config.estimator

    def config_dict(self) -> dict[str, Any]:
        return {"name": self.name, "attack": self.attack.config_dict(), "estimator": asdict(self.estimator)}

    def __repr__(self) -> str:
        return f"EstimatedAttack({self.attack!r}, {self.estimator.tag!r})"

    def run_output(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> AttackOutput:
        """The inner attack's output (its findings included), its gradients taken under the estimator."""
        with apply_estimator(model, self.estimator) as attacked:
            return self.attack.run_output(attacked, x, y, threat, generator)


# Tried in order, each only where the previous ones all failed. The training-time STE first (the naive attack),
# then surrogates that pass gradient where the STE is zero (identity: everywhere; approx_sign: Bi-Real's
# triangle; tanh:5, concentrated on units near their threshold), then the two broadest estimators again with the
# softmax un-saturated by T = 16 (a power of two, so the logits' order is kept exactly).
DEFAULT_ESTIMATORS: tuple[GradientEstimator, ...] = (
    GradientEstimator("ste"),
    GradientEstimator("identity"),
    GradientEstimator("approx_sign"),
    GradientEstimator("tanh:5"),
    GradientEstimator("ste", 16.0),
    GradientEstimator("identity", 16.0),
)


@dataclass(frozen=True)
class AdaptiveAttackConfig:
    estimators: tuple[GradientEstimator, ...] = DEFAULT_ESTIMATORS

    def __post_init__(self) -> None:
        ests = tuple(GradientEstimator.parse(e) for e in self.estimators)
        if not ests:
            raise ValueError("an adaptive attack needs at least one gradient estimator")
        object.__setattr__(self, "estimators", ests)


class AdaptiveAttack(Attack):
    """One attack under several gradient estimators, keeping each sample's worst case (``"<attack>_adaptive"``).

    A sample counts as fooled if any estimator fooled it, and keeps the first adversarial example found; a sample
    no estimator fooled gets the last estimator's result. Estimators with the same effect on the model (see
    :func:`effective_estimator`) run once.

    Each estimator starts from the same generator state and sees the whole batch, in which the samples already
    fooled are replaced by their adversarial examples. The inner attack therefore skips those at once (they are
    misclassified from the start) while every still-robust sample gets exactly the random draws it would get from
    that estimator alone: random starts are drawn for the whole batch, so handing over only a subset would change
    them. Hence the adaptive attack is never weaker, sample by sample, than any of its estimators run alone with
    the same generator (up to floating-point differences between batch compositions). Attacks without early exit
    (FGSM) still spend one gradient on the fooled samples; their results are discarded.
    """

    name = "adaptive"
    Config = AdaptiveAttackConfig
    config: AdaptiveAttackConfig
    inner_class: ClassVar[type[Attack] | None] = None

    def __init__(self, attack: Attack, estimators: Sequence[GradientEstimator | str | None] | None = None) -> None:
        if not isinstance(attack, Attack):
            raise TypeError(f"attack must be a configured Attack, got {type(attack).__name__}")
        self.attack = attack
        self.config = AdaptiveAttackConfig() if estimators is None else AdaptiveAttackConfig(
            tuple(GradientEstimator.parse(e) for e in estimators))
        self.name = f"{attack.name}_adaptive"  # type: ignore[misc]
        self.needs_gradients = attack.needs_gradients  # type: ignore[misc]
        self.family, self.norms = attack.family, attack.norms  # type: ignore[misc]

    @property
    def estimators(self) -> tuple[GradientEstimator, ...]:
        return self.config.estimators

    def config_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "attack": self.attack.config_dict(),
            "estimators": [asdict(e) for e in self.estimators],
        }

    def __repr__(self) -> str:
        return f"AdaptiveAttack({self.attack!r}, {[e.tag for e in self.estimators]!r})"

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        start = generator.get_state()
        x_adv = x.clone()
        fooled = predict(model, x) != y
        seen: set[tuple[tuple[str, ...], float]] = set()
        for est in self.estimators:
            if bool(fooled.all()):
                break
            effect = effective_estimator(model, est)
            if effect in seen:
                continue
            seen.add(effect)
            generator.set_state(start)
            shown = torch.where(fooled.view(-1, *([1] * (x.dim() - 1))), x_adv, x)
            candidate = EstimatedAttack(self.attack, est)(model, shown, y, threat, generator)
            robust = ~fooled
            x_adv[robust] = candidate[robust]  # newly fooled: the adversarial example; still robust: the latest try
            fooled[robust] = predict(model, candidate[robust]) != y[robust]
        return x_adv


def adaptive_attack_class(inner: type[Attack]) -> type[AdaptiveAttack]:
    """A registry-ready class ``"<inner>_adaptive"`` taking the inner attack's parameters plus ``estimators``.

    ``adaptive_attack_class(PGD)(steps=20, estimators=["ste", "identity"])`` is PGD-20 under those two estimators.
    """

    class Adaptive(AdaptiveAttack):
        name = f"{inner.name}_adaptive"
        needs_gradients = inner.needs_gradients
        family, norms = inner.family, inner.norms
        inner_class = inner

        def __init__(
            self,
            config: Any | None = None,
            *,
            estimators: Sequence[GradientEstimator | str | None] | None = None,
            **params: Any,
        ) -> None:
            super().__init__(inner(config, **params), estimators)

    Adaptive.__name__ = Adaptive.__qualname__ = f"{inner.__name__}Adaptive"
    Adaptive.__doc__ = f"{inner.__name__} under several BNN gradient estimators, worst case per sample."
    return Adaptive


__all__ = [
    "DEFAULT_ESTIMATORS",
    "AdaptiveAttack",
    "AdaptiveAttackConfig",
    "EstimatedAttack",
    "EstimatedAttackConfig",
    "GradientEstimator",
    "LogitTemperature",
    "adaptive_attack_class",
    "apply_estimator",
    "effective_estimator",
]
