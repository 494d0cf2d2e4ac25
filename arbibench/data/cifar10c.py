"""CIFAR-10-C (Hendrycks & Dietterich, ICLR 2019): the CIFAR-10 test set under 15 corruptions at 5 severities.

The official layout, which :mod:`arbibench.data.corruptions.generate` also writes::

    <data>/CIFAR-10-C/<corruption>.npy   uint8 [5 * B, 32, 32, 3]: severity s is rows (s - 1) * B .. s * B
    <data>/CIFAR-10-C/labels.npy         uint8 [5 * B]: the labels of those rows

where B = 10,000 (the whole test set, in its order) for the official files and B = N for a regenerated set of the
first N test images. A regenerated folder carries ``arbibench-regenerated.json`` (seed, N, checksums); its presence
is what makes every result read from the folder say "regenerated". The official archive (2.9 GB) comes from Zenodo
with :func:`download_cifar10c`, verified by its MD5 and extracted atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arbibench.data.cifar10 import DataFormatError, default_data_dir
from arbibench.data.download import download_and_extract

#: RobustBench's names and order (``robustbench.data.CORRUPTIONS``).
CORRUPTIONS = (
    "shot_noise", "motion_blur", "snow", "pixelate", "gaussian_noise", "defocus_blur", "brightness", "fog",
    "zoom_blur", "frost", "glass_blur", "impulse_noise", "contrast", "jpeg_compression", "elastic_transform",
)
SEVERITIES = (1, 2, 3, 4, 5)
FOLDER = "CIFAR-10-C"
MANIFEST = "arbibench-regenerated.json"
OFFICIAL_BLOCK = 10_000
CIFAR10C_URL = "https://zenodo.org/records/2535967/files/CIFAR-10-C.tar?download=1"
CIFAR10C_MD5 = "56bf5dcef84df0e2308c6dcbcbbd8499"  # as listed on the Zenodo record
OFFICIAL = "official"
REGENERATED = "regenerated"


def cifar10c_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<data>/CIFAR-10-C`` for the data folder (argument, ``$ARBIBENCH_DATA`` or ``~/.cache/arbibench``)."""
    return default_data_dir(data_dir) / FOLDER


def _missing(folder: Path, what: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} not found under {folder}. Regenerate CIFAR-10-C from the CIFAR-10 test set with "
        "`arbibench corruptions generate` (seeded; a subset with --n-examples), or fetch the official 2.9 GB "
        "archive with `arbibench corruptions download`; pass --data-dir / data_dir if it lives elsewhere."
    )


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The generator's manifest of a regenerated folder, or None for the official files."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        result: dict[str, Any] | None = json.loads(path.read_text())
        return result
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataFormatError(f"{path} is not valid JSON ({e}); regenerate the folder with "
                              "`arbibench corruptions generate`.") from e


def cifar10c_source(data_dir: str | os.PathLike[str] | None = None) -> str:
    """``"regenerated"`` when the folder was written by arbibench's generator, else ``"official"``."""
    return REGENERATED if read_manifest(cifar10c_dir(data_dir)) is not None else OFFICIAL


def _load_npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise _missing(path.parent, path.name)
    try:
        result: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
        return result
    except (ValueError, OSError) as e:
        raise DataFormatError(f"cannot read {path}: {e}. Delete it and regenerate or download CIFAR-10-C.") from e


def read_labels(data_dir: str | os.PathLike[str] | None = None) -> tuple[np.ndarray, int]:
    """The labels of one severity block (int64 [B]) and the block size B, checked across the five blocks."""
    folder = cifar10c_dir(data_dir)
    labels = _load_npy(folder / "labels.npy")
    if labels.ndim != 1 or len(labels) == 0 or len(labels) % 5:
        raise DataFormatError(
            f"{folder / 'labels.npy'} has shape {labels.shape}; expected [5 * B] (B images per severity). "
            "Delete the folder and regenerate or download CIFAR-10-C."
        )
    block = len(labels) // 5
    lab = np.asarray(labels).astype(np.int64)
    first = lab[:block]
    if any(not np.array_equal(first, lab[s * block : (s + 1) * block]) for s in range(1, 5)) or first.max() > 9:
        raise DataFormatError(f"{folder / 'labels.npy'}: the five severity blocks disagree or hold labels outside "
                              "0..9; the file is corrupt. Delete the folder and regenerate or download it.")
    return first, block


def read_cell(
    corruption: str, severity: int, data_dir: str | os.PathLike[str] | None = None, n_examples: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n_examples`` images (uint8 NHWC) of one (corruption, severity) cell and their labels."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f"unknown CIFAR-10-C corruption {corruption!r}; known: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or severity not in SEVERITIES:
        raise ValueError(f"severity must be one of 1..5, got {severity!r}")
    folder = cifar10c_dir(data_dir)
    labels, block = read_labels(data_dir)
    images = _load_npy(folder / f"{corruption}.npy")
    if images.dtype != np.uint8 or images.shape != (5 * block, 32, 32, 3):
        raise DataFormatError(
            f"{folder / (corruption + '.npy')} holds {images.dtype} {tuple(images.shape)}; expected uint8 "
            f"({5 * block}, 32, 32, 3) to match labels.npy. Delete the folder and regenerate or download it."
        )
    n = block if n_examples is None else n_examples
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= block:
        raise ValueError(
            f"n_examples must be an integer from 1 to {block} (images per severity in {folder}), got {n_examples!r}"
            + ("; regenerate with a larger --n-examples for more" if block < OFFICIAL_BLOCK else "")
        )
    start = (severity - 1) * block
    return np.array(images[start : start + n]), labels[:n].copy()


def load_cifar10c(
    n_examples: int | None = None,
    severity: int = 5,
    data_dir: str | os.PathLike[str] | None = None,
    corruptions: Sequence[str] = CORRUPTIONS,
    *,
    download: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CIFAR-10-C at one severity: ``n_examples`` images per corruption, grouped by corruption in the given order.

    Returns ``x`` (float32 [len(corruptions) * n, 3, 32, 32] in [0, 1]), ``y`` (int64) and the CIFAR-10 test-set
    ``indices`` of the clean images (rows ``k * n .. (k + 1) * n`` are ``corruptions[k]``). Unlike RobustBench's
    loader, whose ``n_examples`` is split over the corruptions, ``n_examples`` counts images per (corruption,
    severity) cell; None takes every image the folder holds. ``download=True`` fetches the official archive when
    the folder is missing.
    """
    if isinstance(corruptions, str):
        corruptions = [corruptions]
    if not corruptions:
        raise ValueError("corruptions is empty; name at least one of " + ", ".join(CORRUPTIONS))
    if download and not (cifar10c_dir(data_dir) / "labels.npy").is_file():
        download_cifar10c(data_dir)
    xs, ys = [], []
    for name in corruptions:
        x, y = read_cell(name, severity, data_dir, n_examples)
        xs.append(x)
        ys.append(y)
    images = torch.from_numpy(np.concatenate(xs)).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
    n = len(ys[0])
    return images, torch.from_numpy(np.concatenate(ys)), torch.arange(n).repeat(len(corruptions))


def download_cifar10c(
    data_dir: str | os.PathLike[str] | None = None, *, url: str | None = None, md5: str | None = None
) -> Path:
    """Fetch the official CIFAR-10-C archive from Zenodo, check its MD5, extract ``CIFAR-10-C/`` atomically.

    A regenerated folder in the way is refused rather than replaced (move it first); ``url`` and ``md5`` exist for
    mirrors and tests.
    """
    root = default_data_dir(data_dir)
    if read_manifest(root / FOLDER) is not None:
        raise FileExistsError(
            f"{root / FOLDER} holds a regenerated CIFAR-10-C; move or delete it before downloading the official files."
        )
    path = download_and_extract(url or CIFAR10C_URL, root, expect=FOLDER, md5=md5 or CIFAR10C_MD5)
    read_labels(root)  # the archive is the dataset it claims to be
    return path
