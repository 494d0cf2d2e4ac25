"""The ARBiBench protocol: presets (``presets``), running them over the zoo (``run``), the common-corruptions preset
(``corruptions``), the report tables (``report``) and their commands (``cli``). The presets are re-exported here."""

from arbibench.protocol.presets import (
    BLACK_BOX,
    CORRUPTION_PROTOCOLS,
    FAMILIES,
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

__all__ = [
    "BLACK_BOX",
    "CORRUPTION_PROTOCOLS",
    "FAMILIES",
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
