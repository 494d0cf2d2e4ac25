"""eps* as every table of the leaderboard writes it: the median over the correctly classified images with its 95%
interval, in 1/255 for Linf, and "<= floor" wherever the search was censored (images fooled even at its floor).

Why one module: the site and the markdown tables must never disagree on what a censored median reads as; a median
at the search's floor is a bound, not a measurement of the floor. Older cards (before the descent search) only
hold the median over every image (misclassified ones at 0); their cell says "all images".

The bracket ``[certified, attacked]`` puts the two ends of the median side by side: no input within the certified
radius fools the median image (a verifier proved it; ``arbibench verify``), and the attacks found examples at the
attacked one. Where no verifier ran, the lower end reads "not verified": an attack alone bounds eps* from above only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from arbibench.leaderboard.cards import ModelCard

NONE = "-"


def eps_star_value(value: float | None, card: ModelCard, censor: bool = True) -> str:
    """One eps* statistic of ``card``: Linf in 1/255 (L2 as is), ``<= floor`` where censored, ``inf`` where the
    images were not fooled up to eps_max. ``censor=False`` for a certified radius: a lower bound below the search's
    floor is a measurement, not a censored attack result."""
    scale, unit = (255.0, "/255") if card.threat_model == "Linf" else (1.0, "")
    if value is None or value == float("inf"):
        return "inf"
    found = card.eps_star
    if censor and found is not None and found.eps_floor is not None and found.is_censored(value):
        return f"\u2264 {found.eps_floor * scale:.3g}{unit}"
    return f"{value * scale:.3g}{unit}"


def eps_star_median_text(card: ModelCard, interval: bool = True) -> str:
    """The card's median eps* (and its 95% interval), marked "all images" on an older card; a dash without one."""
    value, ci95, correct_only = card.eps_star_median
    if value is None and ci95 is None:
        return NONE
    text = eps_star_value(value, card)
    if interval and ci95 is not None:
        text += f" [{eps_star_value(ci95[0], card)}, {eps_star_value(ci95[1], card)}]"
    return text if correct_only else f"{text} (all images)"


NOT_VERIFIED = "not verified"


def eps_star_bracket_text(card: ModelCard) -> str:
    """``[certified, attacked]`` of the median eps* over the correctly classified images: the verifier's certified
    median (``not verified`` without one) and the attacks' median; a dash on a card without the descent search."""
    value, _, correct_only = card.eps_star_median
    found = card.eps_star
    if not correct_only or found is None:
        return NONE
    certified = found.median_certified
    lower = NOT_VERIFIED if certified is None else eps_star_value(certified, card, censor=False)
    return f"[{lower}, {eps_star_value(value, card)}]"


def eps_star_text(summary: dict[str, Any] | None) -> str:
    """Median eps* over the correctly classified images with its 95% interval, in 1/255 for Linf budgets, ``<=
    floor`` where censored (fooled even at the search's floor); ``-`` when the run computed none. A summary of the
    earlier search (no ``search`` key) shows its all-image median, marked so."""
    if summary is None:
        return "-"
    scale, unit = (255.0, "/255") if summary["norm"] == "Linf" else (1.0, "")
    floor = (summary.get("eps_floor") or 0.0) if summary.get("censored") != 0 else 0.0  # nothing censored: exact

    def one(v: float | None) -> str:
        if v is None:
            return "inf"
        return f"\u2264 {floor * scale:.3g}{unit}" if 0 < v <= floor else f"{v * scale:.3g}{unit}"

    if "median_eps_star_correct" not in summary:
        lo, hi = summary["median_eps_star_ci95"]
        return f"{one(summary['median_eps_star'])} [{one(lo)}, {one(hi)}] (all images)"
    lo, hi = summary["median_eps_star_correct_ci95"]
    return f"{one(summary['median_eps_star_correct'])} [{one(lo)}, {one(hi)}]"


def eps_star_separation_text(cards: Sequence[ModelCard]) -> str:
    """:func:`eps_star_separation` of the BNN cards (binary activations) that name an FP twin and hold the descent
    search's correct-image interval (older cards hold none)."""
    rows = []
    for card in cards:
        _, ci95, correct_only = card.eps_star_median
        if card.bits_activations == 1 and card.fp_twin and correct_only and ci95 is not None:
            rows.append((card.name, card.fp_twin, ci95[0], ci95[1]))
    return eps_star_separation(rows)


def eps_star_separation(rows: Iterable[tuple[str, str, float | None, float | None]]) -> str:
    """Whether the median eps* tells apart the BNNs that share an FP twin (the BNNs of one training recipe), from
    ``(bnn, twin, low, high)`` rows of the correct-image median's 95% interval: per twin, the pairs whose intervals
    are disjoint, or that every interval overlaps. Empty where no twin has two BNNs.

    Why: eps* of sign networks often sits at the search's floor, where a column of equal bounds would read as a
    ranking; a reader is told outright when it is not one. A censored end is the floor, so two censored medians
    overlap and a censored one lies below any interval that starts above the floor; an end of ``None`` (not fooled
    up to eps_max) lies above every finite one."""
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for name, twin, low, high in rows:
        # None: not fooled up to eps_max (the tables' "inf"), at either end
        groups.setdefault(twin, []).append((name, math.inf if low is None else low, math.inf if high is None else high))
    sentences = []
    for twin, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        members.sort(key=lambda r: (r[1], r[2], r[0]))
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1:] if a[2] < b[1] or b[2] < a[1]]
        n_pairs = len(members) * (len(members) - 1) // 2
        who = f"the {len(members)} BNNs that share the FP twin `{twin}`"
        if not pairs:
            sentences.append(f"Median eps\\* does not tell apart {who}: their 95% intervals all overlap.")
            continue
        named = ", ".join(f"`{lo[0]}` < `{hi[0]}`" for lo, hi in (sorted(p, key=lambda r: r[2]) for p in pairs))
        sentences.append(f"Median eps\\* tells apart {len(pairs)} of the {n_pairs} pairs of {who} (95% intervals "
                         f"disjoint: {named}); the other pairs' intervals overlap." if len(pairs) < n_pairs else
                         f"Median eps\\* tells apart every pair of {who} (95% intervals disjoint: {named}).")
    return " ".join(sentences)
