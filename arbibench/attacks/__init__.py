"""Attacks and threat models: geometry per norm, one file per attack, and the registry (``registry.py``) that picks
attacks by name. This module is the public face only: it re-exports, and the first name used registers every attack.

The names load on first use (PEP 562 ``__getattr__``), so that ``arbibench attacks --help`` does not import torch; the
first name used imports every attack module, as the eager import did, so every attack is registered before any is
looked up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports

if TYPE_CHECKING:
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
        ACCESS_GROUPS,
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
    from arbibench.attacks.corners import CornersConfig, RandomCorners
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
    from arbibench.attacks.threat import L2, Linf, ThreatModel, ThreatModelViolation, get_threat_model, parse_eps
    from arbibench.attacks.transfer import Transfer, TransferConfig

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "APGD": "arbibench.attacks.apgd",
    "APGDDLR": "arbibench.attacks.apgd",
    "APGDT": "arbibench.attacks.apgd",
    "APGDConfig": "arbibench.attacks.apgd",
    "APGDDLRConfig": "arbibench.attacks.apgd",
    "APGDTConfig": "arbibench.attacks.apgd",
    "apgd_checkpoints": "arbibench.attacks.apgd",
    "apgd_should_halve": "arbibench.attacks.apgd",
    "AutoAttack": "arbibench.attacks.autoattack",
    "AutoAttackConfig": "arbibench.attacks.autoattack",
    "ACCESS_GROUPS": "arbibench.attacks.base",
    "BLACK_BOX": "arbibench.attacks.base",
    "DECISION_BASED": "arbibench.attacks.base",
    "FAMILIES": "arbibench.attacks.base",
    "SCORE_BASED": "arbibench.attacks.base",
    "TRANSFER": "arbibench.attacks.base",
    "WHITE_BOX": "arbibench.attacks.base",
    "Attack": "arbibench.attacks.base",
    "AttackOutput": "arbibench.attacks.base",
    "access_group": "arbibench.attacks.base",
    "CornersConfig": "arbibench.attacks.corners",
    "RandomCorners": "arbibench.attacks.corners",
    "CWLinf": "arbibench.attacks.cw",
    "CWLinfConfig": "arbibench.attacks.cw",
    "CWL2": "arbibench.attacks.cw_l2",
    "CWL2Config": "arbibench.attacks.cw_l2",
    "DeepFool": "arbibench.attacks.deepfool",
    "DeepFoolConfig": "arbibench.attacks.deepfool",
    "AdaptiveAttack": "arbibench.attacks.estimators",
    "EstimatedAttack": "arbibench.attacks.estimators",
    "GradientEstimator": "arbibench.attacks.estimators",
    "adaptive_attack_class": "arbibench.attacks.estimators",
    "apply_estimator": "arbibench.attacks.estimators",
    "FAB": "arbibench.attacks.fab",
    "FABT": "arbibench.attacks.fab",
    "FABConfig": "arbibench.attacks.fab",
    "FABTConfig": "arbibench.attacks.fab",
    "FGSM": "arbibench.attacks.fgsm",
    "FGSMConfig": "arbibench.attacks.fgsm",
    "HopSkipJump": "arbibench.attacks.hsja",
    "HSJAConfig": "arbibench.attacks.hsja",
    "LOSSES": "arbibench.attacks.losses",
    "MIFGSM": "arbibench.attacks.mifgsm",
    "MIFGSMConfig": "arbibench.attacks.mifgsm",
    "NES": "arbibench.attacks.nes",
    "NESConfig": "arbibench.attacks.nes",
    "PGD": "arbibench.attacks.pgd",
    "PGDConfig": "arbibench.attacks.pgd",
    "RayS": "arbibench.attacks.rays",
    "RaySConfig": "arbibench.attacks.rays",
    "ALIASES": "arbibench.attacks.registry",
    "ATTACKS": "arbibench.attacks.registry",
    "attack_class": "arbibench.attacks.registry",
    "attack_defaults": "arbibench.attacks.registry",
    "attacks_from_spec": "arbibench.attacks.registry",
    "canonical_name": "arbibench.attacks.registry",
    "describe_attacks": "arbibench.attacks.registry",
    "get_attack": "arbibench.attacks.registry",
    "parse_attack_spec": "arbibench.attacks.registry",
    "register": "arbibench.attacks.registry",
    "SimBA": "arbibench.attacks.simba",
    "SimBAConfig": "arbibench.attacks.simba",
    "Square": "arbibench.attacks.square",
    "SquareConfig": "arbibench.attacks.square",
    "L2": "arbibench.attacks.threat",
    "Linf": "arbibench.attacks.threat",
    "ThreatModel": "arbibench.attacks.threat",
    "ThreatModelViolation": "arbibench.attacks.threat",
    "get_threat_model": "arbibench.attacks.threat",
    "parse_eps": "arbibench.attacks.threat",
    "Transfer": "arbibench.attacks.transfer",
    "TransferConfig": "arbibench.attacks.transfer",
}

__all__ = [
    "ALIASES",
    "attack_class",
    "attack_defaults",
    "attacks_from_spec",
    "canonical_name",
    "describe_attacks",
    "parse_attack_spec",
    "register",
    "ACCESS_GROUPS",
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
    "CornersConfig",
    "RandomCorners",
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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
