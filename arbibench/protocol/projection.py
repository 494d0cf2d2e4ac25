"""A full-protocol run's cost, projected from the same model's quick card before the run has stored a batch.

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
    if not card.get("quick"):
        raise ValueError(f"{card.get('name')}: not a quick card; a full run's own store batches give its cost")
    full, quick = _attack_presets(preset)
    n = card["n_examples"]
    n_white = full.n_white_box or 10_000  # None: the whole CIFAR-10 test set
    budgets = {a.name: dict(a.params).get("max_queries") for a in full.attacks}
    quick_budgets = {a.name: dict(a.params).get("max_queries") for a in quick.attacks}
    white = low = high = 0.0
    for attack, a in card["attacks"].items():
        if a["family"] == "white-box":
            white += a["seconds"] * n_white / n["white-box"]
            continue
        images = a["seconds"] * full.n_black_box / n["black-box"]
        full_q, quick_q = budgets.get(attack), quick_budgets.get(attack)
        low += images
        high += images * (full_q / quick_q if full_q and quick_q else 1.0)
    return QuickCardProjection(str(card.get("name")), float(card["seconds"]), white / 3600, (low / 3600, high / 3600))


def _attack_presets(preset: str) -> tuple[Protocol, Protocol]:
    full, quick = get_protocol(preset), get_protocol(preset, quick=True)
    if not isinstance(full, Protocol) or not isinstance(quick, Protocol):
        raise ValueError(f"{preset}: a corruption preset has no attacks to project")
    return full, quick


def quick_card_path(model_info: str | Path, model: str, preset: str = "cifar10") -> Path:
    """Where ``protocol run --quick`` writes ``model``'s card of ``preset``: <model_info>/<dataset>/<threat>/."""
    full, _ = _attack_presets(preset)
    return Path(model_info) / full.dataset / full.threat_model / f"{model}.json"


def project_model(model_info: str | Path, model: str, preset: str = "cifar10") -> QuickCardProjection | None:
    """The projection from ``model``'s quick card in ``model_info``, or None where it has none (or a full one)."""
    path = quick_card_path(model_info, model, preset)
    if not path.is_file():
        return None
    card = json.loads(path.read_text())
    return project_from_quick_card(card, preset) if card.get("quick") else None
