"""The grid-check cards on the leaderboard: does robustness measured on float inputs hold on 8-bit images?

``arbibench protocol grid-check --model-info DIR`` writes one card per model to
``DIR/<dataset>/grid_check/<name>.json`` (:mod:`arbibench.protocol.grid_check`). This module reads them as
:class:`arbibench.cards.GridCheckCard` (no torch) and renders LEADERBOARD.md's "8-bit inputs" table: per eps, ACC* in
float and on the uint8 grid, their paired difference, and how many float adversarial examples survive rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from arbibench.cards import (
    GRID_CHECK,
    CardError,
    GridCheckCard,
    GridCheckRow,
    check_card_files,
    read_card_json,
    stale_checkpoint,
)
from arbibench.leaderboard.cards import LeaderboardError

GRID_TITLE = "8-bit inputs"


def load_grid_cards(model_info: Path) -> list[GridCheckCard]:
    """Every grid-check card under ``model_info`` (``*/grid_check/*.json``), sorted by name; none when the folder
    has none. A malformed one is an error naming the file and the field."""
    cards = []
    for path in check_card_files(model_info, GRID_CHECK):
        try:
            data = read_card_json(path)
            if isinstance(data, dict) and data.get("kind", GRID_CHECK) == GRID_CHECK:
                cards.append(GridCheckCard.parse(path, data))
        except CardError as e:
            raise LeaderboardError(f"{e}; run `arbibench protocol grid-check --model-info` again") from e
    return sorted(cards, key=lambda c: (c.dataset, c.name))


def _cell(row: GridCheckRow | None) -> str:
    """ACC* float -> grid, the paired difference in points [95%], and the float examples surviving rounding."""
    if row is None:
        return "-"
    d = row.difference
    text = (f"{100 * row.acc_float.value:.1f}% → {100 * row.acc_grid.value:.1f}%, "
            f"{100 * d.value:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]")
    if row.survival is None:
        return text + "; no float example"
    return text + f"; {100 * row.survival.value:.0f}% of {row.float_fooled} survive"


def grid_markdown(cards: list[GridCheckCard], pins: Mapping[str, str] | None = None) -> str:
    """One row per model: the attack and images, clean accuracy, and a cell per eps (:func:`_cell`). A card of a
    checkpoint the zoo has replaced is marked."""
    pins = pins or {}
    eps = list(dict.fromkeys(r.eps_text for c in cards for r in c.rows))
    lines = ["| " + " | ".join(["model", "attack, images", "clean", *eps]) + " |",
             "| --- | --- | ---: |" + " ---: |" * len(eps)]
    for card in cards:
        stale = stale_checkpoint(card, pins) is not None
        name = f"`{card.name}`" + (" (stale: measured replaced weights)" if stale else "")
        cells = [name, f"{card.attack_name}, {card.n_images} images", f"{100 * card.clean_acc.value:.1f}%",
                 *[_cell(card.row(e)) for e in eps]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
