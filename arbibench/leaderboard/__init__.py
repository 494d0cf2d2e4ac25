"""The leaderboard: a static site and paper figures built from the protocol runner's model cards.

The card readers are bound at once (torch- and matplotlib-free); ``build_site`` and ``BuildReport`` load on first use
(PEP 562), so that loading the CLI does not pull in matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports
from arbibench.leaderboard.cards import CardError, LeaderboardError, ModelCard, load_cards

if TYPE_CHECKING:
    from arbibench.leaderboard.site import BuildReport, build_site

# public name -> the module that defines it (the names above the table are bound eagerly)
_LAZY: dict[str, str] = {
    "BuildReport": "arbibench.leaderboard.site",
    "build_site": "arbibench.leaderboard.site",
}

__all__ = ["BuildReport", "CardError", "LeaderboardError", "ModelCard", "build_site", "load_cards"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
