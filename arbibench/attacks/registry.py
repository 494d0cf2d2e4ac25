"""The attack registry: every attack by name, AutoAttack's names as aliases, and attack specs from the command line.

``get_attack("pgd", steps=20)`` builds a configured attack; ``get_attack("apgd-t")`` is AutoAttack's name for
``apgd_t`` (an alias only: the attack, its ``name`` and its store key are those of ``apgd_t``). Each class declares
its ``family`` and ``norms`` (:class:`~arbibench.attacks.base.Attack`), which :func:`describe_attacks` reads for
``arbibench attacks list``.

The gradient and query attacks are registered here. The two composite attacks register themselves when their
module is imported (the package ``arbibench.attacks`` imports both): AutoAttack and the transfer attack build other
attacks by registry name, so they sit one step above this module, and the arrows stay one-way.

An attack spec is ``name`` or ``name(param=value, ...)``, several separated by commas:
``"square(max_queries=300),pgd(steps=20)"``. Values are Python literals (``20``, ``0.5``, ``'ce'``, ``True``,
``('apgd_ce', 'square')``), a fraction such as ``8/255``, or a bare word taken as a string (``loss=ce``). Unknown
parameters and bad values are refused by the attack's config, naming the parameter.
"""

from __future__ import annotations

import ast
import re
from dataclasses import MISSING, fields
from fractions import Fraction
from typing import Any

from arbibench.attacks.apgd import APGD, APGDDLR, APGDT
from arbibench.attacks.base import WHITE_BOX, Attack
from arbibench.attacks.corners import RandomCorners
from arbibench.attacks.cw import CWLinf
from arbibench.attacks.cw_l2 import CWL2
from arbibench.attacks.deepfool import DeepFool
from arbibench.attacks.estimators import EstimatedAttack, adaptive_attack_class
from arbibench.attacks.fab import FAB, FABT
from arbibench.attacks.fgsm import FGSM
from arbibench.attacks.hsja import HopSkipJump
from arbibench.attacks.mifgsm import MIFGSM
from arbibench.attacks.nes import NES
from arbibench.attacks.pgd import PGD
from arbibench.attacks.rays import RayS
from arbibench.attacks.simba import SimBA
from arbibench.attacks.square import Square

ATTACKS: dict[str, type[Attack]] = {}
#: AutoAttack's (and RobustBench's) spellings of the same attacks.
ALIASES: dict[str, str] = {
    "apgd-ce": "apgd_ce",
    "apgd-dlr": "apgd_dlr",
    "apgd-t": "apgd_t",
    "fab-t": "fab_t",
}


def register(cls: type[Attack], *, adaptive: bool = False) -> type[Attack]:
    """Add ``cls`` under ``cls.name``; ``adaptive=True`` also adds ``<name>_adaptive`` (several BNN gradient
    estimators, worst case per sample). A second class under a taken name is refused."""
    classes = [cls, adaptive_attack_class(cls)] if adaptive else [cls]
    for c in classes:
        if not c.name or c.name in ATTACKS and ATTACKS[c.name] is not c:
            raise ValueError(f"cannot register {c.__name__}: the attack name {c.name!r} is empty or taken")
        ATTACKS[c.name] = c
    return cls


_cls: type[Attack]
for _cls in (FGSM, PGD, MIFGSM, CWLinf, APGD, APGDDLR, APGDT, CWL2, DeepFool, FAB, FABT):
    register(_cls, adaptive=True)
for _cls in (Square, SimBA, NES, HopSkipJump, RayS, RandomCorners):
    register(_cls)


def canonical_name(name: str) -> str:
    """The registry name of ``name`` (case-insensitive, AutoAttack aliases resolved), or one ValueError listing
    the known names."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in ATTACKS:
        raise ValueError(
            f"unknown attack {name!r}; known: {', '.join(sorted(ATTACKS))} (AutoAttack's names "
            f"{', '.join(ALIASES)} are accepted too; `arbibench attacks list` shows all)"
        )
    return key


def attack_class(name: str) -> type[Attack]:
    """The class registered under ``name`` (aliases accepted)."""
    return ATTACKS[canonical_name(name)]


def get_attack(name: str, **params: Any) -> Attack:
    """A configured attack by registry name (case-insensitive, aliases accepted); bad parameters raise ValueError
    naming them.

    ``"pgd@identity"`` or ``"apgd_ce@tanh:5,T=16"`` runs the attack under that gradient estimator (BPDA surrogate
    and logit temperature), see :class:`~arbibench.attacks.estimators.GradientEstimator`.
    """
    base, _, estimator = str(name).partition("@")
    attack = attack_class(base)(**params)
    return EstimatedAttack(attack, estimator) if estimator else attack


def attack_defaults(cls: type[Attack]) -> dict[str, Any]:
    """Every config parameter of ``cls`` with its default value (``arbibench attacks list``, ``--help``)."""
    out: dict[str, Any] = {}
    for f in fields(cls.Config):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def describe_attacks() -> list[dict[str, Any]]:
    """One row per registered attack: name, family, norms, AutoAttack aliases and parameter defaults, by name."""
    aliases: dict[str, list[str]] = {}
    for alias, target in ALIASES.items():
        aliases.setdefault(target, []).append(alias)
    return [
        {"name": name, "family": cls.family, "norms": cls.norms, "aliases": aliases.get(name, []),
         "defaults": attack_defaults(cls), "white_box": cls.family == WHITE_BOX}
        for name, cls in sorted(ATTACKS.items())
    ]


# -- attack specs: "square(max_queries=300),pgd(steps=20)" -------------------------------------------------------
_FRACTION = re.compile(r"^\s*-?\d+(\.\d+)?\s*/\s*\d+(\.\d+)?\s*$")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:@+-]*$")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in attack spec {text!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ValueError(f"unclosed bracket or quote in attack spec {text!r}")
    parts.append(text[start:])
    return parts


def _value(text: str, where: str) -> Any:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    if _FRACTION.match(text):
        return float(Fraction(text.replace(" ", "")))
    if _WORD.match(text):
        return text
    raise ValueError(f"cannot read the value {text!r} of {where}: write a number, 8/255, a word or a quoted string")


def parse_attack_spec(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``"square(max_queries=300),pgd"`` -> ``[("square", {"max_queries": 300}), ("pgd", {})]``; names are
    checked against the registry (parameters are checked when the attack is built, see :func:`attacks_from_spec`)."""
    pieces = [p.strip() for p in _split_top(str(text))]
    # "apgd_ce@tanh:5,T=16": the estimator's own comma; glue "T=..." back onto the estimator before it
    merged: list[str] = []
    for piece in pieces:
        if merged and "@" in merged[-1] and "(" not in merged[-1] and re.match(r"^T\s*=", piece):
            merged[-1] += "," + piece
        else:
            merged.append(piece)
    specs: list[tuple[str, dict[str, Any]]] = []
    if "" in merged and any(merged):  # "fgsm,,pgd" is a typo; "," alone names no attack (below)
        raise ValueError(f"attack spec {text!r} has an empty item (two commas in a row, or one at an end); remove it")
    for piece in merged:
        if not piece:
            continue
        name, paren, rest = piece.partition("(")
        name = name.strip()
        params: dict[str, Any] = {}
        if paren:
            if not rest.rstrip().endswith(")"):
                raise ValueError(f"attack spec {piece!r} must end with ')': e.g. square(max_queries=300)")
            for item in _split_top(rest.rstrip()[:-1]):
                if not item.strip():
                    continue
                key, eq, value = item.partition("=")
                key = key.strip()
                if not eq or not key.isidentifier():
                    raise ValueError(f"attack spec {piece!r}: write parameters as name=value, got {item.strip()!r}")
                if key in params:
                    raise ValueError(f"attack spec {piece!r} sets {key!r} twice")
                params[key] = _value(value, f"{name}.{key}")
        canonical_name(name.partition("@")[0])
        specs.append((name, params))
    if not specs:
        raise ValueError(f"attack spec {text!r} names no attack; e.g. 'fgsm,pgd(steps=20)'")
    return specs


def attacks_from_spec(text: str) -> list[Attack]:
    """The configured attacks of an attack spec, each validated by its config (the error names the parameter)."""
    out = []
    for name, params in parse_attack_spec(text):
        try:
            out.append(get_attack(name, **params))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name}: {e}") from None
    return out
