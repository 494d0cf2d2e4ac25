"""The pinned sha256 of every shipped checkpoint, in ``checkpoints/SHA256SUMS`` (the format ``sha256sum -c`` reads).

A pin is the second record of a checkpoint's bytes, beside its card: loading refuses a file that does not match its
pin, so a card and a file swapped together are still caught. Pins live in a data file, not in code, so the queue that
retrains a zoo model pins the new checkpoint (``arbibench zoo pin``) in the same commit as the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from arbibench.files import atomic_write_text, sha256_file

PIN_FILE = Path(__file__).parent / "checkpoints" / "SHA256SUMS"
_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)\.safetensors$")


def read_pins(path: Path = PIN_FILE) -> dict[str, str]:
    """Model name -> pinned sha256; a malformed line is an error naming it."""
    pins: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"{path}:{n}: expected '<sha256>  <name>.safetensors', got {line!r}")
        pins[m.group(2)] = m.group(1)
    return pins


def pin(name: str, checkpoint_dir: Path | None = None, path: Path = PIN_FILE, *, add: bool = False
        ) -> tuple[str | None, str]:
    """Pin the checkpoint ``name`` as it is now, after checking its card names the same bytes; returns (old, new).
    ``add`` ships a model the zoo does not ship yet (a new backbone's first checkpoint, e.g. ``resnet18_bnn``)."""
    folder = checkpoint_dir or path.parent
    weights, card_path = folder / f"{name}.safetensors", folder / f"{name}.json"
    if not weights.is_file():
        raise FileNotFoundError(f"no checkpoint {weights} to pin; export it first (arbibench train --export)")
    new = sha256_file(weights)
    card_sha = json.loads(card_path.read_text()).get("sha256") if card_path.is_file() else None
    if card_sha != new:
        raise ValueError(f"{card_path} names sha256 {card_sha}, but {weights.name} is {new}: export the run again "
                         "so card and file agree before pinning")
    pins = read_pins(path)
    old = pins.get(name)
    if name not in pins and not add:
        raise ValueError(f"{name!r} is not a shipped zoo model (shipped: {', '.join(sorted(pins))}); to ship it as a "
                         "new one, pin it with --add")
    pins[name] = new
    atomic_write_text("".join(f"{sha}  {n}.safetensors\n" for n, sha in pins.items()), path)
    return old, new
