"""Importers of the papers' own checkpoints: one module per source, each a :class:`Source`.

``arbibench import --from SOURCE`` (``arbibench.import_checkpoint``) reads the file with the restricted unpickler
(:mod:`.checkpoint_file`), converts its state dict with the source's conversion (:mod:`.source`) into the arbibench
preset that computes the paper's eval-mode forward pass, and writes safetensors plus a card.
"""

from __future__ import annotations

from arbibench.models.importers.biper import BIPER
from arbibench.models.importers.checkpoint_file import PickleRefusedError, extract_state_dict, read_torch_checkpoint
from arbibench.models.importers.irnet import IRNET
from arbibench.models.importers.rbnn import RBNN
from arbibench.models.importers.reactnet import REACTNET
from arbibench.models.importers.recu import RECU
from arbibench.models.importers.siman import SIMAN
from arbibench.models.importers.source import Conversion, PublishedModel, Source, build_converted_model

SOURCES: dict[str, Source] = {s.name: s for s in (RECU, RBNN, SIMAN, BIPER, IRNET, REACTNET)}


def get_source(name: str) -> Source:
    """The importer of ``name``, or one ValueError listing the supported sources."""
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; supported: {', '.join(SOURCES)}")
    return SOURCES[name]


__all__ = [
    "SOURCES",
    "Conversion",
    "PickleRefusedError",
    "PublishedModel",
    "Source",
    "build_converted_model",
    "extract_state_dict",
    "get_source",
    "read_torch_checkpoint",
]
