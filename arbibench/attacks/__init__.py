"""Attacks and threat models: geometry per norm, one file per attack, and a registry to pick attacks by name."""

from __future__ import annotations

from typing import Any

from arbibench.attacks.base import Attack
from arbibench.attacks.fgsm import FGSM, FGSMConfig
from arbibench.attacks.losses import LOSSES
from arbibench.attacks.pgd import PGD, PGDConfig
from arbibench.attacks.threat import (
    L2,
    Linf,
    ThreatModel,
    ThreatModelViolation,
    get_threat_model,
    parse_eps,
)

ATTACKS: dict[str, type[Attack]] = {cls.name: cls for cls in (FGSM, PGD)}


def get_attack(name: str, **params: Any) -> Attack:
    """A configured attack by registry name (case-insensitive); bad parameters raise ValueError naming them."""
    cls = ATTACKS.get(str(name).lower())
    if cls is None:
        raise ValueError(f"unknown attack {name!r}; known: {', '.join(sorted(ATTACKS))}")
    return cls(**params)


__all__ = [
    "ATTACKS",
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
