"""Attacks and threat models: geometry per norm, one file per attack, and a registry to pick attacks by name."""

from __future__ import annotations

from typing import Any

from arbibench.attacks.apgd import (
    APGD,
    APGDDLR,
    APGDT,
    APGDConfig,
    APGDDLRConfig,
    APGDTConfig,
    apgd_checkpoints,
    apgd_should_halve,
)
from arbibench.attacks.base import Attack
from arbibench.attacks.cw import CWLinf, CWLinfConfig
from arbibench.attacks.estimators import (
    AdaptiveAttack,
    EstimatedAttack,
    GradientEstimator,
    adaptive_attack_class,
    apply_estimator,
)
from arbibench.attacks.fgsm import FGSM, FGSMConfig
from arbibench.attacks.losses import LOSSES
from arbibench.attacks.mifgsm import MIFGSM, MIFGSMConfig
from arbibench.attacks.pgd import PGD, PGDConfig
from arbibench.attacks.threat import (
    L2,
    Linf,
    ThreatModel,
    ThreatModelViolation,
    get_threat_model,
    parse_eps,
)

_GRADIENT_ATTACKS: tuple[type[Attack], ...] = (FGSM, PGD, MIFGSM, CWLinf, APGD, APGDDLR, APGDT)
ATTACKS: dict[str, type[Attack]] = {cls.name: cls for cls in _GRADIENT_ATTACKS}
# "<attack>_adaptive": the attack under several BNN gradient estimators, worst case per sample.
ATTACKS.update({cls.name: cls for cls in map(adaptive_attack_class, _GRADIENT_ATTACKS)})


def get_attack(name: str, **params: Any) -> Attack:
    """A configured attack by registry name (case-insensitive); bad parameters raise ValueError naming them.

    ``"pgd@identity"`` or ``"apgd_ce@tanh:5,T=16"`` runs the attack under that gradient estimator (BPDA surrogate
    and logit temperature), see :class:`GradientEstimator`.
    """
    base, _, estimator = str(name).partition("@")
    cls = ATTACKS.get(base.lower())
    if cls is None:
        raise ValueError(f"unknown attack {base!r}; known: {', '.join(sorted(ATTACKS))}")
    attack = cls(**params)
    return EstimatedAttack(attack, estimator) if estimator else attack


__all__ = [
    "AdaptiveAttack",
    "EstimatedAttack",
    "GradientEstimator",
    "adaptive_attack_class",
    "apply_estimator",
    "APGD",
    "APGDDLR",
    "APGDT",
    "ATTACKS",
    "MIFGSM",
    "APGDConfig",
    "APGDDLRConfig",
    "APGDTConfig",
    "CWLinf",
    "CWLinfConfig",
    "MIFGSMConfig",
    "apgd_checkpoints",
    "apgd_should_halve",
    "FGSM",
    "FGSMConfig",
    "L2",
    "LOSSES",
    "PGD",
    "PGDConfig",
    "Attack",
    "Linf",
    "ThreatModel",
    "ThreatModelViolation",
    "get_attack",
    "get_threat_model",
    "parse_eps",
]
