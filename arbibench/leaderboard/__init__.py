"""The leaderboard: a static site and paper figures built from the protocol runner's model cards.

``build_site`` is imported on first use, so that loading the CLI does not pull in matplotlib.
"""

from typing import Any

from arbibench.leaderboard.cards import CardError, LeaderboardError, ModelCard, load_cards

__all__ = ["BuildReport", "CardError", "LeaderboardError", "ModelCard", "build_site", "load_cards"]


def __getattr__(name: str) -> Any:
    if name in ("build_site", "BuildReport"):
        from arbibench.leaderboard import site  # start-up: matplotlib loads only when a site is built

        return getattr(site, name)
    raise AttributeError(f"module 'arbibench.leaderboard' has no attribute {name!r}")
