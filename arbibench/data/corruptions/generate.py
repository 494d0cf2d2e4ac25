"""Regenerate CIFAR-10-C from the real CIFAR-10 test set, in the official file layout, atomically.

The first N test images (N = ``n_examples``, 10,000 for the whole set) are corrupted by every corruption at every
severity and written as ``<corruption>.npy`` + ``labels.npy`` into a temporary folder beside the target, with a
manifest (``arbibench-regenerated.json``: seed, N, parameters' source, file checksums, seconds); the folder is
renamed into place only when complete. A folder holding the official files (no manifest) is never replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.data.cifar10c import CORRUPTIONS, FOLDER, MANIFEST, SEVERITIES, cifar10c_dir, read_manifest
from arbibench.data.corruptions import CHUNK, corrupt
from arbibench.files import sha256_file

GENERATOR = "arbibench corruptions generate"
# Raised whenever a corruption's output changes, so that a folder made by an older generator is made again rather
# than kept: 3 = defocus and glass blur computed with CPU-independent arithmetic (their bytes differed by CPU before);
# 2 = frost textures matched to the official photos' brightness (1 and unversioned: the dark textures).
GENERATOR_VERSION = 3
PARAMETERS_SOURCE = (
    "severity table of Hendrycks & Dietterich's CIFAR generator (hendrycks/robustness, "
    "ImageNet-C/create_c/make_cifar_c.py); arbibench's own implementation; frost uses procedural textures "
    "matched to the official frost photos' brightness, tint and grain"
)


def _manifest_matches(manifest: dict[str, Any] | None, seed: int, n: int, corruptions: Sequence[str]) -> bool:
    return (manifest is not None and manifest.get("generator_version") == GENERATOR_VERSION
            and manifest.get("seed") == seed and manifest.get("n_examples") == n
            and manifest.get("corruptions") == list(corruptions))


def generate_cifar10c(
    n_examples: int = 1000,
    *,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    corruptions: Sequence[str] = CORRUPTIONS,
    force: bool = False,
    on_cell: Callable[[str, int, int], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Write a regenerated CIFAR-10-C of the first ``n_examples`` test images to ``out`` (default
    ``<data>/CIFAR-10-C``); returns the folder and its manifest.

    An existing regenerated folder with the same seed, N and corruptions, made by this generator version, is kept
    as it is (the output is deterministic) unless ``force``; one made with other settings or by an older generator
    (other corruption images) is replaced. ``on_cell(corruption, severity,
    n)`` is called after each cell, for progress.
    """
    if isinstance(n_examples, bool) or not isinstance(n_examples, int) or not 1 <= n_examples <= 10_000:
        raise ValueError(f"--n-examples must be an integer from 1 to 10000 (CIFAR-10 test images), got {n_examples!r}")
    unknown = [c for c in corruptions if c not in CORRUPTIONS]
    if unknown or not corruptions:
        raise ValueError(f"unknown corruptions {unknown}; choose from {', '.join(CORRUPTIONS)}")
    twice = sorted({c for c in corruptions if list(corruptions).count(c) > 1})
    if twice:
        raise ValueError(f"--corruptions names {', '.join(twice)} twice; name each corruption once")
    target = Path(out) if out is not None else cifar10c_dir(data_dir)
    if target.exists():
        if not target.is_dir():
            raise FileExistsError(f"{target} exists and is not a folder; pass another --out")
        manifest = read_manifest(target)
        if manifest is None and any(target.iterdir()):
            raise FileExistsError(
                f"{target} holds files not written by arbibench (the official CIFAR-10-C?); it is never replaced. "
                "Pass --out to write the regenerated set elsewhere."
            )
        if not force and _manifest_matches(manifest, seed, n_examples, corruptions):
            return target, manifest  # type: ignore[return-value]
    x, y = read_cifar10_arrays("test", data_dir)
    clean = np.ascontiguousarray(x[:n_examples].transpose(0, 2, 3, 1))
    labels = y[:n_examples].astype(np.uint8)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.generating-", dir=target.parent))
    t0 = time.perf_counter()
    try:
        seconds: dict[str, float] = {}
        for name in corruptions:
            t = time.perf_counter()
            cells = []
            for s in SEVERITIES:
                cells.append(corrupt(clean, name, s, seed))
                if on_cell is not None:
                    on_cell(name, s, n_examples)
            np.save(tmp / f"{name}.npy", np.concatenate(cells))
            seconds[name] = round(time.perf_counter() - t, 2)
        np.save(tmp / "labels.npy", np.tile(labels, len(SEVERITIES)))
        manifest = {
            "source": "regenerated",
            "generator": GENERATOR,
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "n_examples": n_examples,
            "first_test_images": n_examples,
            "chunk": CHUNK,
            "corruptions": list(corruptions),
            "severities": list(SEVERITIES),
            "parameters": PARAMETERS_SOURCE,
            "seconds": round(time.perf_counter() - t0, 2),
            "seconds_per_corruption": seconds,
            "sha256": {p.name: sha256_file(p) for p in sorted(tmp.glob("*.npy"))},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        os.chmod(tmp, 0o755)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
            target.rename(old)
        tmp.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, manifest


__all__ = ["FOLDER", "generate_cifar10c"]
