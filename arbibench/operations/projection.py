"""A full-protocol run's cost, projected from the same model's quick card: the whole run before it has stored a
batch, and per attack what it has not reached yet (:mod:`arbibench.operations.progress`).

A quick card records each attack's wall time on the quick subsets and budgets. The full preset evaluates white-box
attacks on 20 times the images (500 -> 10,000 on CIFAR-10), so their time scales by that; black-box attacks on 5 times
the images (100 -> 500) and at most 5 times the queries (1000 -> 5000): only an image still unbroken at the quick
budget costs more, so black-box time gets a range. The eps sweep and eps* are not in the cards' attack times and are
left out (0.12 h of the 29.6 h projected for the eight standard models, BENCHMARKS.md). The hours are those of the
machine and threads the card ran on (cards record the machine since 2026-12-03). Read the range as rough: the first
full run (``resnet20_fp``, same CPU as its card) took 1.8x less than its low end, the second (``resnet20_reactnet``,
on a CPU 1.5-1.8x slower per attack step than its card's) 11% more than its high end (BENCHMARKS.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arbibench.protocol.presets import Protocol, get_protocol


@dataclass(frozen=True)
class QuickCardProjection:
    """Projected hours of a model's full run: white-box, and black-box as a (low, high) range."""

    model: str
    quick_seconds: float
    white_box_h: float
    black_box_h: tuple[float, float]

    @property
    def total_h(self) -> tuple[float, float]:
        return self.white_box_h + self.black_box_h[0], self.white_box_h + self.black_box_h[1]


def project_from_quick_card(card: dict[str, Any], preset: str = "cifar10") -> QuickCardProjection:
    """The full ``preset``'s hours for the model of ``card`` (a quick card's JSON); ValueError for another card."""
    full, quick = _attack_presets(preset)
    n_white = full.n_white_box or 10_000  # None: the whole CIFAR-10 test set
    white = low = high = 0.0
    for family, per_image_low, per_image_high in per_image_seconds(card, full, quick).values():
        if family == "white-box":
            white += per_image_high * n_white
        else:
            low, high = low + per_image_low * full.n_black_box, high + per_image_high * full.n_black_box
    return QuickCardProjection(str(card.get("name")), float(card["seconds"]), white / 3600, (low / 3600, high / 3600))


def per_image_seconds(card: dict[str, Any], full: Protocol, quick: Protocol) -> dict[str, tuple[str, float, float]]:
    """Per attack of a quick card: its family and the (low, high) seconds an image costs at ``full``'s budgets.

    White-box attacks cost per image what they cost on the card (low == high); a black-box attack costs at least
    that and at most that times the ratio of the query budgets, for an image unbroken through the whole budget.
    ValueError for a card that is not a quick card."""
    if not card.get("quick"):
        raise ValueError(f"{card.get('name')}: not a quick card; a full run's own store batches give its cost")
    n = card["n_examples"]
    budgets = {a.name: dict(a.params).get("max_queries") for a in full.attacks}
    quick_budgets = {a.name: dict(a.params).get("max_queries") for a in quick.attacks}
    out: dict[str, tuple[str, float, float]] = {}
    for attack, a in card["attacks"].items():
        family = a["family"]
        per_image = a["seconds"] / n[family]
        full_q, quick_q = budgets.get(attack), quick_budgets.get(attack)
        ratio = max(full_q / quick_q, 1.0) if family != "white-box" and full_q and quick_q else 1.0
        out[attack] = (family, per_image, per_image * ratio)
    return out


def _attack_presets(preset: str) -> tuple[Protocol, Protocol]:
    full, quick = get_protocol(preset), get_protocol(preset, quick=True)
    if not isinstance(full, Protocol) or not isinstance(quick, Protocol):
        raise ValueError(f"{preset}: a corruption preset has no attacks to project")
    return full, quick


def quick_card_path(model_info: str | os.PathLike[str], model: str, preset: str = "cifar10") -> Path:
    """Where ``protocol run --quick`` writes ``model``'s card of ``preset``: <model_info>/<dataset>/<threat>/."""
    full, _ = _attack_presets(preset)
    return Path(model_info) / full.dataset / full.threat_model / f"{model}.json"


def quick_card(model_info: str | os.PathLike[str], model: str, preset: str = "cifar10") -> dict[str, Any] | None:
    """``model``'s quick card of ``preset`` in ``model_info`` (its JSON), or None where it has none (or a full one)."""
    path = quick_card_path(model_info, model, preset)
    if not path.is_file():
        return None
    card = json.loads(path.read_text())
    return card if isinstance(card, dict) and card.get("quick") else None


def project_model(model_info: str | Path, model: str, preset: str = "cifar10") -> QuickCardProjection | None:
    """The projection from ``model``'s quick card in ``model_info``, or None where it has none (or a full one)."""
    card = quick_card(model_info, model, preset)
    return None if card is None else project_from_quick_card(card, preset)
