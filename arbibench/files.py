"""Atomic file writes and sha256: every file arbibench writes appears whole or not at all.

A write goes to a temporary file in the same folder (same file system), is flushed to disk, then renamed over the
target, so a crash or a full disk leaves the old file, never half of a new one. Standard library only: the card
schema and the leaderboard use it without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(data: bytes, path: str | os.PathLike[str]) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, fsync, rename)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(text: str, path: str | os.PathLike[str]) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(text.encode("utf-8"), path)


def atomic_write_json(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` as indented JSON with a final newline, atomically."""
    atomic_write_text(json.dumps(obj, indent=2) + "\n", path)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
