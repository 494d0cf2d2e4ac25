"""Pinning a re-exported checkpoint: its sha256 goes into ``checkpoints/SHA256SUMS`` (the format ``sha256sum -c``
reads), the one list of what ships (read by :func:`arbibench.cards.shipped_sha256`).

A pin is the second record of a checkpoint's bytes, beside its card: loading refuses a file that does not match its
pin, so a card and a file swapped together are still caught. Pins live in a data file, not in code, so the queue that
retrains a zoo model pins the new checkpoint (``arbibench zoo pin``) in the same commit as the file.
"""

from __future__ import annotations

from pathlib import Path

from arbibench.cards import PIN_FILE, CheckpointCard, shipped_sha256
from arbibench.files import atomic_write_text, sha256_file


def pin(name: str, checkpoint_dir: Path | None = None, path: Path = PIN_FILE, *, add: bool = False
        ) -> tuple[str | None, str]:
    """Pin the checkpoint ``name`` as it is now, after checking its card names the same bytes; returns (old, new).
    ``add`` ships a model the zoo does not ship yet (a new backbone's first checkpoint, e.g. ``resnet18_bnn``)."""
    folder = checkpoint_dir or path.parent
    weights, card_path = folder / f"{name}.safetensors", folder / f"{name}.json"
    if not weights.is_file():
        raise FileNotFoundError(f"no checkpoint {weights} to pin; export it first (arbibench train --export)")
    new = sha256_file(weights)
    card_sha = CheckpointCard.read(card_path).sha256 if card_path.is_file() else None
    if card_sha != new:
        raise ValueError(f"{card_path} names sha256 {card_sha}, but {weights.name} is {new}: export the run again "
                         "so card and file agree before pinning")
    pins = shipped_sha256(path)
    old = pins.get(name)
    if name not in pins and not add:
        raise ValueError(f"{name!r} is not a shipped zoo model (shipped: {', '.join(sorted(pins))}); to ship it as a "
                         "new one, pin it with --add")
    pins[name] = new
    atomic_write_text("".join(f"{sha}  {n}.safetensors\n" for n, sha in pins.items()), path)
    return old, new
