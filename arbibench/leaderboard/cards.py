"""Model cards for the leaderboard: find ``model_info/**/*.json`` and read each through the one card schema
(:mod:`arbibench.cards`), so a bad card fails the build by file and field.

The site and figures trust these objects completely; all checking happens in the schema, once.
"""

from __future__ import annotations

from pathlib import Path

from arbibench.cards import (
    CHECK_FOLDERS,
    CORRUPTIONS_THREAT,
    FAMILY_ORDER,
    AttackResult,
    CardError,
    ModelCard,
    SweepPoint,
    order_families,
    parse_card,
    read_card_json,
)

__all__ = [
    "CORRUPTIONS_THREAT",
    "FAMILY_ORDER",
    "AttackResult",
    "CardError",
    "LeaderboardError",
    "ModelCard",
    "SweepPoint",
    "card_files",
    "load_card",
    "load_cards",
    "order_families",
    "parse_card",
    "read_card_json",
]


class LeaderboardError(ValueError):
    """A problem with the leaderboard's input or output that the user can fix (shown without a traceback)."""


def load_card(path: Path) -> ModelCard:
    """Read and check one card file."""
    return parse_card(path, read_card_json(path))


def card_files(model_info: Path) -> list[Path]:
    """Every card file under ``model_info`` (any depth, ``*.json``, not hidden); one clear error if there is none."""
    model_info = Path(model_info)
    if not model_info.exists():
        raise LeaderboardError(
            f"model-info folder {model_info} does not exist (the protocol runner writes cards to "
            "model_info/<dataset>/<threat>/<name>.json; pass --model-info to point elsewhere)"
        )
    if not model_info.is_dir():
        raise LeaderboardError(f"model-info path {model_info} is not a folder")
    # Hidden files and folders are skipped: they are a writer's temporaries, not finished cards.
    files = sorted(
        p for p in model_info.rglob("*.json")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(model_info).parts)
    )
    if not files:
        raise LeaderboardError(f"no model cards (*.json) under {model_info}: run the protocol runner first")
    return files


def ranked_card(d: dict[str, object]) -> bool:
    """Whether a decoded card belongs on an attack leaderboard: not a corruptions card, not a check's card (deploy or
    grid check), and measured on the simulation with float inputs (a protocol run with ``--inference deployed`` or
    ``--grid uint8`` writes its cards beside them, in a ``deployed/`` or ``uint8/`` folder, so they never share a
    ranking)."""
    return (d.get("threat_model") != CORRUPTIONS_THREAT and d.get("kind") not in CHECK_FOLDERS
            and d.get("inference", "simulation") == "simulation" and d.get("grid", "float") == "float")


def load_cards(model_info: Path) -> list[ModelCard]:
    """All attack cards under ``model_info`` (corruptions cards are read by
    :func:`arbibench.leaderboard.corruptions.load_corruption_cards`), checked; names unique per leaderboard."""
    files = card_files(model_info)
    decoded = [(p, read_card_json(p)) for p in files]
    cards = [parse_card(p, d) for p, d in decoded if isinstance(d, dict) and ranked_card(d)]
    seen: dict[tuple[str, str, str], Path | None] = {}
    for card in cards:
        key = (*card.group, card.name)
        if key in seen:
            raise CardError(
                card.path or model_info, "name", f"{card.name!r} is also the name of {seen[key]} on the same "
                f"leaderboard ({card.dataset}, {card.threat_model})"
            )
        seen[key] = card.path
    return cards
