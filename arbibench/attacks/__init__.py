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
from arbibench.attacks.autoattack import AutoAttack, AutoAttackConfig
from arbibench.attacks.base import (
    BLACK_BOX,
    DECISION_BASED,
    FAMILIES,
    SCORE_BASED,
    TRANSFER,
    WHITE_BOX,
    Attack,
    access_group,
)
from arbibench.attacks.cw import CWLinf, CWLinfConfig
from arbibench.attacks.cw_l2 import CWL2, CWL2Config
from arbibench.attacks.deepfool import DeepFool, DeepFoolConfig
from arbibench.attacks.estimators import (
    AdaptiveAttack,
    EstimatedAttack,
    GradientEstimator,
    adaptive_attack_class,
    apply_estimator,
)
from arbibench.attacks.fab import FAB, FABT, FABConfig, FABTConfig
from arbibench.attacks.fgsm import FGSM, FGSMConfig
from arbibench.attacks.hsja import HopSkipJump, HSJAConfig
from arbibench.attacks.losses import LOSSES
from arbibench.attacks.mifgsm import MIFGSM, MIFGSMConfig
from arbibench.attacks.nes import NES, NESConfig
from arbibench.attacks.pgd import PGD, PGDConfig
from arbibench.attacks.rays import RayS, RaySConfig
from arbibench.attacks.simba import SimBA, SimBAConfig
from arbibench.attacks.square import Square, SquareConfig
from arbibench.attacks.threat import (
    L2,
    Linf,
    ThreatModel,
    ThreatModelViolation,
    get_threat_model,
    parse_eps,
)
from arbibench.attacks.transfer import Transfer, TransferConfig

_GRADIENT_ATTACKS: tuple[type[Attack], ...] = (
    FGSM,
    PGD,
    MIFGSM,
    CWLinf,
    APGD,
    APGDDLR,
    APGDT,
    CWL2,
    DeepFool,
    FAB,
    FABT,
)
# Score-based, decision-based and transfer attacks: they see the model only through a QueryModel (query.py).
_BLACK_BOX_ATTACKS: tuple[type[Attack], ...] = (Square, SimBA, NES, HopSkipJump, RayS, Transfer)
ATTACKS: dict[str, type[Attack]] = {cls.name: cls for cls in _GRADIENT_ATTACKS + _BLACK_BOX_ATTACKS}
# "<attack>_adaptive": the attack under several BNN gradient estimators, worst case per sample.
ATTACKS.update({cls.name: cls for cls in map(adaptive_attack_class, _GRADIENT_ATTACKS)})
# The AutoAttack ensemble looks its components up in ATTACKS when it is built.
ATTACKS[AutoAttack.name] = AutoAttack


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
    "BLACK_BOX",
    "DECISION_BASED",
    "FAMILIES",
    "SCORE_BASED",
    "TRANSFER",
    "WHITE_BOX",
    "access_group",
    "AdaptiveAttack",
    "EstimatedAttack",
    "GradientEstimator",
    "adaptive_attack_class",
    "apply_estimator",
    "APGD",
    "APGDDLR",
    "APGDT",
    "ATTACKS",
    "AutoAttack",
    "AutoAttackConfig",
    "MIFGSM",
    "APGDConfig",
    "APGDDLRConfig",
    "APGDTConfig",
    "CWLinf",
    "CWLinfConfig",
    "CWL2",
    "CWL2Config",
    "DeepFool",
    "DeepFoolConfig",
    "MIFGSMConfig",
    "apgd_checkpoints",
    "apgd_should_halve",
    "FAB",
    "FABT",
    "FABConfig",
    "FABTConfig",
    "FGSM",
    "FGSMConfig",
    "L2",
    "LOSSES",
    "PGD",
    "PGDConfig",
    "NES",
    "NESConfig",
    "SimBA",
    "SimBAConfig",
    "Square",
    "SquareConfig",
    "HopSkipJump",
    "HSJAConfig",
    "RayS",
    "RaySConfig",
    "Transfer",
    "TransferConfig",
    "Attack",
    "Linf",
    "ThreatModel",
    "ThreatModelViolation",
    "get_attack",
    "get_threat_model",
    "parse_eps",
]
