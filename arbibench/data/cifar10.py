"""CIFAR-10 as [0, 1] float tensors, with the dataset indices of every sample returned.

Three on-disk formats are read, in this order of preference:

1. a folder of ``test.npz`` / ``train_{0..4}.npz`` (``x`` uint8 NHWC, ``y`` int64);
2. the official binary release (``cifar-10-batches-bin/*.bin``: per record 1 label byte + 3072 pixel bytes);
3. the official python release (``cifar-10-batches-py``), which is a pickle and therefore read only when the caller
   passes ``allow_pickle=True`` (unpickling runs arbitrary code).

If none is present the official binary tarball is downloaded, verified and extracted atomically
(:mod:`arbibench.data.download`).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch

from arbibench.cards import CLASS_NAMES
from arbibench.data.download import download_and_extract
from arbibench.data.subsets import select_indices

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
CIFAR10_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
CIFAR10_CLASSES = CLASS_NAMES["cifar10"]
SPLIT_SIZES = {"train": 50_000, "test": 10_000}
_RECORD = 1 + 3 * 32 * 32


class DataFormatError(ValueError):
    """A data file exists but is not what it claims to be."""


def default_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Data folder: the argument, else ``$ARBIBENCH_DATA``, else ``~/.cache/arbibench``."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("ARBIBENCH_DATA")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "arbibench"


def _npz_files(root: Path, split: str) -> list[Path] | None:
    names = ["test.npz"] if split == "test" else [f"train_{i}.npz" for i in range(5)]
    for folder in (root / "cifar10", root):
        files = [folder / n for n in names]
        if all(f.is_file() for f in files):
            return files
    return None


def _read_npz(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for f in files:
        try:
            with np.load(f, allow_pickle=False) as d:
                x, y = d["x"], d["y"]
        except Exception as e:  # zipfile/BadZip/KeyError/ValueError all mean the same to the user
            raise DataFormatError(
                f"cannot read CIFAR-10 file {f}: {e}. Delete it and rerun to re-fetch, or point data_dir elsewhere."
            ) from e
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3) or y.shape != (x.shape[0],):
            raise DataFormatError(
                f"{f} holds x{tuple(x.shape)} {x.dtype}, y{tuple(y.shape)}; expected x uint8 [N,32,32,3] and y [N]."
            )
        xs.append(x)
        ys.append(y.astype(np.int64))
    # a C-contiguous copy, not a transposed view: the layout is part of the result (see load_cifar10)
    return np.ascontiguousarray(np.concatenate(xs).transpose(0, 3, 1, 2)), np.concatenate(ys)


def _bin_files(root: Path, split: str) -> list[Path] | None:
    names = ["test_batch.bin"] if split == "test" else [f"data_batch_{i}.bin" for i in range(1, 6)]
    for folder in (root / "cifar-10-batches-bin", root / "cifar10" / "cifar-10-batches-bin"):
        files = [folder / n for n in names]
        if all(f.is_file() for f in files):
            return files
    return None


def _read_bin(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size == 0 or raw.size % _RECORD:
            raise DataFormatError(
                f"{f} has {raw.size} bytes, not a whole number of {_RECORD}-byte CIFAR-10 records: the file is "
                "truncated or corrupt. Delete the cifar-10-batches-bin folder and rerun to download it again."
            )
        rec = raw.reshape(-1, _RECORD)
        ys.append(rec[:, 0].astype(np.int64))
        xs.append(rec[:, 1:].reshape(-1, 3, 32, 32))
    return np.concatenate(xs), np.concatenate(ys)


def _pickle_files(root: Path, split: str) -> list[Path] | None:
    names = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    folder = root / "cifar-10-batches-py"
    files = [folder / n for n in names]
    return files if all(f.is_file() for f in files) else None


def _read_pickle(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for f in files:
        try:
            with open(f, "rb") as fh:
                d = pickle.load(fh, encoding="bytes")  # noqa: S301 - only reached with allow_pickle=True
            xs.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(d[b"labels"], dtype=np.int64))
        except Exception as e:  # truncated pickle, wrong keys or shapes: all mean a corrupt batch file
            raise DataFormatError(f"cannot read CIFAR-10 pickle batch {f}: {e!r}. Delete it and rerun.") from e
    return np.concatenate(xs), np.concatenate(ys)


def has_cifar10(split: str = "test", data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the split lies in the data folder in a format read without a download (npz, binary or, if allowed
    later, pickle): lets passive commands such as ``protocol progress`` report instead of downloading."""
    root = default_data_dir(data_dir)
    return any(find(root, split) for find in (_npz_files, _bin_files, _pickle_files))


def read_cifar10_arrays(
    split: str = "test",
    data_dir: str | os.PathLike[str] | None = None,
    *,
    allow_pickle: bool = False,
    download: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """The whole split as C-contiguous uint8 NCHW images and int64 labels (no subset, no conversion)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown CIFAR-10 split {split!r}; use 'test' or 'train'.")
    root = default_data_dir(data_dir)
    if files := _npz_files(root, split):
        x, y = _read_npz(files)
    elif files := _bin_files(root, split):
        x, y = _read_bin(files)
    elif files := _pickle_files(root, split):
        if not allow_pickle:
            raise DataFormatError(
                f"only the python-pickle CIFAR-10 batches were found in {files[0].parent}. Unpickling runs code from "
                "the file; pass allow_pickle=True if you trust it, or provide the binary or npz format."
            )
        x, y = _read_pickle(files)
    elif download:
        download_and_extract(CIFAR10_URL, root, md5=CIFAR10_MD5, expect="cifar-10-batches-bin")
        return read_cifar10_arrays(split, root, allow_pickle=allow_pickle, download=False)
    else:
        raise FileNotFoundError(
            f"no CIFAR-10 {split} data under {root} (looked for {split} npz files, cifar-10-batches-bin/ and "
            "cifar-10-batches-py/). Set ARBIBENCH_DATA or pass data_dir."
        )
    if x.shape[0] != SPLIT_SIZES[split]:
        raise DataFormatError(
            f"CIFAR-10 {split} split under {root} has {x.shape[0]} images, expected {SPLIT_SIZES[split]}: "
            "the files are incomplete. Delete them and rerun to download again."
        )
    if y.min() < 0 or y.max() > 9:
        raise DataFormatError(f"CIFAR-10 labels under {root} fall outside 0..9: the files are corrupt.")
    return x, y


def load_cifar10(
    n_examples: int | None = None,
    split: str = "test",
    data_dir: str | os.PathLike[str] | None = None,
    *,
    seed: int | None = None,
    allow_pickle: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CIFAR-10 images ``x`` (float32 [N,3,32,32] in [0,1]), labels ``y`` (int64) and dataset ``indices``.

    ``n_examples=None`` takes the whole split. With ``seed=None`` the first N samples are taken (RobustBench's
    convention); with a seed, N samples drawn at random without replacement (the protocol's black-box subset),
    returned in increasing index order so that results trace back to dataset positions.

    The images are always *contiguous* NCHW (RobustBench's layout), a fixed choice: a convolution may sum in another
    order on another memory layout, and a BNN's sign of a pre-activation at a rounding boundary then flips, so the
    same images in another layout can give other predictions.
    """
    x, y = read_cifar10_arrays(split, data_dir, allow_pickle=allow_pickle)
    idx = select_indices(len(y), n_examples, seed=seed)
    xs = torch.from_numpy(x[idx]).float().div_(255.0).contiguous()
    return xs, torch.from_numpy(y[idx]), torch.from_numpy(idx)
