"""Order the cards into leaderboards: one per (dataset, threat model), ranked by RS over all attacks.

RS sums ACC_norm over the attacks, so a higher RS is a more robust model relative to its own clean accuracy; ties
on RS are broken by worst-case accuracy, then clean accuracy, and models tied on RS share a rank ("1, 2, 2, 4").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from arbibench.leaderboard.cards import ModelCard, order_families

DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet": "ImageNet", "svhn": "SVHN"}
THREAT_NAMES = {"Linf": "L\u221e", "L2": "L2", "L1": "L1"}


SIZES = ("full", "quick", "eval")  # best first: how far a card's numbers can be compared with a full card's


def protocol_size(card: ModelCard) -> str:
    """``full`` for a card of the protocol at its own sizes and budgets, ``quick`` for the laptop variant (smaller
    subsets, 1000 queries: wider intervals and weaker black-box attacks), ``eval`` for a card of no protocol: one
    ``arbibench eval`` or ``benchmark()`` run, on the images and attacks its user chose."""
    if card.protocol is None:
        return "eval"
    return "quick" if card.quick else "full"


@dataclass(frozen=True)
class Ranked:
    """A card with its rank on its leaderboard."""

    rank: int
    card: ModelCard


@dataclass(frozen=True)
class Board:
    """One leaderboard: the ranked cards of one dataset and threat model."""

    dataset: str
    threat_model: str
    rows: tuple[Ranked, ...]

    @property
    def key(self) -> str:
        """A file-name-safe id, used for section anchors and figure names (``cifar10_Linf``)."""
        return f"{slug(self.dataset)}_{slug(self.threat_model)}"

    @property
    def title(self) -> str:
        dataset = DATASET_NAMES.get(self.dataset, self.dataset)
        return f"{dataset} \u00b7 {THREAT_NAMES.get(self.threat_model, self.threat_model)}"

    @property
    def eps_texts(self) -> list[str]:
        """The budgets of the cards, as written on them (usually one)."""
        texts = {c.card.eps_text or (f"{c.card.eps:g}" if c.card.eps is not None else "") for c in self.rows}
        return sorted(t for t in texts if t)

    @property
    def sizes(self) -> list[str]:
        """The protocol sizes of the board's cards (``full`` first); two means a ranking across sizes, marked."""
        return sorted({protocol_size(r.card) for r in self.rows}, key=SIZES.index)

    @property
    def families(self) -> list[str]:
        return order_families({f for r in self.rows for f in r.card.families})

    @property
    def attacks(self) -> list[tuple[str, str]]:
        """(attack, family) over all cards, grouped by family, in first-seen order within a family."""
        seen: dict[str, str] = {}
        for r in self.rows:
            for a in r.card.attacks.values():
                seen.setdefault(a.name, a.family)
        fam = self.families
        return sorted(seen.items(), key=lambda kv: fam.index(kv[1]) if kv[1] in fam else len(fam))

    def find(self, name: str | None) -> ModelCard | None:
        return next((r.card for r in self.rows if r.card.name == name), None)


def _order_key(card: ModelCard) -> tuple[float, float, float, str]:
    return (-card.rs["all"], -card.worst_case_acc, -card.clean_acc, card.name)


def rank_cards(cards: list[ModelCard]) -> list[Ranked]:
    """Sort by RS (then worst case, clean accuracy, name) and give competition ranks on RS."""
    ordered = sorted(cards, key=_order_key)
    ranked: list[Ranked] = []
    for i, card in enumerate(ordered):
        tied = ranked and ranked[-1].card.rs["all"] == card.rs["all"]
        ranked.append(Ranked(ranked[-1].rank if tied else i + 1, card))
    return ranked


def build_boards(cards: list[ModelCard]) -> list[Board]:
    """One board per (dataset, threat model): CIFAR-10 before ImageNet, L-inf before L2, unknown ones last."""
    groups: dict[tuple[str, str], list[ModelCard]] = {}
    for card in cards:
        groups.setdefault(card.group, []).append(card)
    def order(key: tuple[str, str]) -> tuple[int, str, int, str]:
        ds, tm = key
        known_ds, known_tm = list(DATASET_NAMES), list(THREAT_NAMES)
        return (known_ds.index(ds) if ds in known_ds else len(known_ds), ds,
                known_tm.index(tm) if tm in known_tm else len(known_tm), tm)

    return [Board(ds, tm, tuple(rank_cards(groups[(ds, tm)]))) for ds, tm in sorted(groups, key=order)]


def slug(text: str) -> str:
    """A file-name-safe form of ``text``; texts that had to change get a short hash so two never collide."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-") or "x"
    if clean != text:
        clean = f"{clean[:60]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return clean
