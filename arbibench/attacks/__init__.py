"""Attacks and threat models: geometry per norm, one file per attack, and the registry (``registry.py``) that picks
attacks by name. This module is the public face only: it re-exports, and importing it registers every attack."""

from __future__ import annotations

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
    AttackOutput,
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
from arbibench.attacks.registry import (
    ALIASES,
    ATTACKS,
    attack_class,
    attack_defaults,
    attacks_from_spec,
    canonical_name,
    describe_attacks,
    get_attack,
    parse_attack_spec,
    register,
)
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

__all__ = [
    "ALIASES",
    "attack_class",
    "attack_defaults",
    "attacks_from_spec",
    "canonical_name",
    "describe_attacks",
    "parse_attack_spec",
    "register",
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
    "AttackOutput",
    "Linf",
    "ThreatModel",
    "ThreatModelViolation",
    "get_attack",
    "get_threat_model",
    "parse_eps",
]
