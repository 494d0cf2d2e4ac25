"""The ARBiBench protocol: presets (``presets``), running them over the zoo (``run``: plan each model's evaluations
once, execute, read back), the common-corruptions preset (``corruptions``), their cards (``cards``), the paper's
claims (``claims``), the findings report as a document (``report``; the leaderboard renders it), the deployed-network
and 8-bit-grid checks, and their commands (``cli/``, one module each). The presets are re-exported here.

The names load on first use (PEP 562 ``__getattr__``), so that ``arbibench protocol --help`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports

if TYPE_CHECKING:
    from arbibench.protocol.presets import (
        ACCESS_GROUPS,
        BLACK_BOX,
        CORRUPTION_PROTOCOLS,
        FULL_QUERIES,
        PROTOCOLS,
        QUICK,
        QUICK_QUERIES,
        WHITE_BOX,
        AttackSpec,
        CorruptionProtocol,
        Protocol,
        describe,
        get_protocol,
    )

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "BLACK_BOX": "arbibench.protocol.presets",
    "CORRUPTION_PROTOCOLS": "arbibench.protocol.presets",
    "ACCESS_GROUPS": "arbibench.protocol.presets",
    "FULL_QUERIES": "arbibench.protocol.presets",
    "PROTOCOLS": "arbibench.protocol.presets",
    "QUICK": "arbibench.protocol.presets",
    "QUICK_QUERIES": "arbibench.protocol.presets",
    "WHITE_BOX": "arbibench.protocol.presets",
    "AttackSpec": "arbibench.protocol.presets",
    "CorruptionProtocol": "arbibench.protocol.presets",
    "Protocol": "arbibench.protocol.presets",
    "describe": "arbibench.protocol.presets",
    "get_protocol": "arbibench.protocol.presets",
}

__all__ = [
    "BLACK_BOX",
    "CORRUPTION_PROTOCOLS",
    "ACCESS_GROUPS",
    "FULL_QUERIES",
    "PROTOCOLS",
    "QUICK",
    "QUICK_QUERIES",
    "WHITE_BOX",
    "AttackSpec",
    "CorruptionProtocol",
    "Protocol",
    "describe",
    "get_protocol",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
