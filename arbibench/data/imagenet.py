"""ImageNet-1k images as [0, 1] float tensors, preprocessed the way RobustBench names and defines it.

ImageNet cannot be redistributed, so the user points ``data_dir`` at their own copy in one of two layouts:

* ImageFolder style: one subfolder per wnid (``n01440764/...``). The class index is the wnid's line in a
  ``LOC_synset_mapping.txt`` found in the folder or its parent; without that file all 1000 wnid subfolders must be
  present (empty ones are fine), because the standard index is the position in the sorted list of all 1000 wnids.
* flat: the images plus a ``labels.csv`` with the header ``filename,class_index[,wnid]``.

Either layout may also sit in a ``val/`` subfolder of ``data_dir`` (RobustBench's ``data_dir/val``). Samples are
ordered by file name, which for the official validation files is the ``ILSVRC2012_val_XXXXXXXX`` order, and the
returned indices refer to that order. Only the selected images are decoded.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from arbibench.data.cifar10 import DataFormatError
from arbibench.data.subsets import select_indices

N_CLASSES = 1000
SYNSET_MAPPING = "LOC_synset_mapping.txt"
LABELS_CSV = "labels.csv"
IMAGE_SUFFIXES = frozenset({".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".webp", ".tif", ".tiff"})
_WNID = re.compile(r"n\d{8}")
_BILINEAR = Image.Resampling.BILINEAR
_BICUBIC = Image.Resampling.BICUBIC


def _resize_shorter(img: Image.Image, size: int, resample: Image.Resampling) -> Image.Image:
    # torchvision Resize(int): shorter side to `size`, longer side truncated (not rounded) to keep the aspect ratio
    w, h = img.size
    new = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    return img if new == (w, h) else img.resize(new, resample)


def _center_crop(img: Image.Image, size: int) -> Image.Image:
    # torchvision CenterCrop: offsets rounded with Python's round(); a side shorter than `size` is zero-padded with
    # the image at offset (size - side) // 2. PIL's crop fills the area outside the image with zeros.
    w, h = img.size
    left = -((size - w) // 2) if size > w else round((w - size) / 2)
    top = -((size - h) // 2) if size > h else round((h - size) / 2)
    return img.crop((left, top, left + size, top + size))


PREPROCESSINGS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "Res256Crop224": lambda im: _center_crop(_resize_shorter(im, 256, _BILINEAR), 224),
    "BicubicRes256Crop224": lambda im: _center_crop(_resize_shorter(im, 256, _BICUBIC), 224),
    "Res224": lambda im: im.resize((224, 224), _BILINEAR),
    "Crop288": lambda im: _center_crop(im, 288),
    "none": lambda im: im,
}


def _read_synset_mapping(path: Path) -> list[str]:
    wnids = [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    bad = [w for w in wnids if not _WNID.fullmatch(w)]
    if len(wnids) != N_CLASSES or len(set(wnids)) != N_CLASSES or bad:
        raise DataFormatError(
            f"{path} should list the {N_CLASSES} distinct ImageNet wnids, one per line in class-index order, but has "
            f"{len(wnids)} lines ({len(set(wnids))} distinct){f', e.g. bad entry {bad[0]!r}' if bad else ''}."
        )
    return wnids


def _find_synset_mapping(folder: Path) -> list[str] | None:
    for candidate in (folder / SYNSET_MAPPING, folder.parent / SYNSET_MAPPING):
        if candidate.is_file():
            return _read_synset_mapping(candidate)
    return None


def _flat_samples(folder: Path) -> list[tuple[str, Path, int]]:
    path = folder / LABELS_CSV
    mapping = _find_synset_mapping(folder)
    samples: dict[str, tuple[Path, int]] = {}
    missing: list[str] = []
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = [h.strip() for h in next(rows, [])]
        if header[:2] != ["filename", "class_index"]:
            raise DataFormatError(f"{path} must start with the header 'filename,class_index[,wnid]', got {header}.")
        has_wnid = len(header) > 2 and header[2] == "wnid"
        for line, row in enumerate(rows, start=2):
            if not any(cell.strip() for cell in row):
                continue
            where = f"line {line} of {path}"
            if len(row) < 2:
                raise DataFormatError(f"{where} has {len(row)} field(s), expected filename,class_index.")
            name, label_text = row[0].strip(), row[1].strip()
            try:
                label = int(label_text)
            except ValueError:
                raise DataFormatError(f"{where}: class_index {label_text!r} is not an integer.") from None
            if not 0 <= label < N_CLASSES:
                raise DataFormatError(f"{where}: class_index {label} of {name} is outside 0..{N_CLASSES - 1}.")
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise DataFormatError(f"{where}: {name!r} must be a file name relative to {folder}.")
            if name in samples:
                raise DataFormatError(f"{where}: {name} is listed twice.")
            if has_wnid and mapping is not None and len(row) > 2 and row[2].strip() != mapping[label]:
                raise DataFormatError(
                    f"{where}: wnid {row[2].strip()} disagrees with class_index {label}, which is {mapping[label]} "
                    f"in {SYNSET_MAPPING}."
                )
            file = folder / name
            if not file.is_file():
                missing.append(name)
            samples[name] = (file, label)
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} file(s) listed in {path} are missing from {folder}, e.g. {', '.join(missing[:3])}."
        )
    if not samples:
        raise DataFormatError(f"{path} lists no images.")
    return [(name, file, label) for name, (file, label) in samples.items()]


def _image_folder_samples(folder: Path) -> list[tuple[str, Path, int]]:
    subdirs = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    mapping = _find_synset_mapping(folder)
    if mapping is None:
        if len(subdirs) != N_CLASSES or not all(_WNID.fullmatch(d) for d in subdirs):
            raise DataFormatError(
                f"{folder} has {len(subdirs)} class subfolders and no {SYNSET_MAPPING} in it or its parent. The "
                f"standard class index is a wnid's position among all {N_CLASSES} sorted wnids, so either put "
                f"{SYNSET_MAPPING} (one 'wnid names' line per class, in index order) next to the subfolders, create "
                f"all {N_CLASSES} wnid subfolders (empty ones are fine), or use a flat folder with {LABELS_CSV}."
            )
        mapping = subdirs
    index = {wnid: i for i, wnid in enumerate(mapping)}
    unknown = [d for d in subdirs if d not in index]
    if unknown:
        raise DataFormatError(
            f"subfolder(s) {', '.join(unknown[:3])} of {folder} are not ImageNet-1k wnids listed in {SYNSET_MAPPING}."
        )
    samples = [
        (f.name, f, index[d])
        for d in subdirs
        for f in (folder / d).iterdir()
        if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not samples:
        raise DataFormatError(f"the class subfolders of {folder} hold no images ({', '.join(sorted(IMAGE_SUFFIXES))}).")
    return samples


def _list_samples(root: Path) -> list[tuple[Path, int]]:
    """All (file, class index) pairs, sorted by file name (then class, for ImageFolder name clashes)."""
    if not root.is_dir():
        raise FileNotFoundError(
            f"ImageNet folder {root} does not exist or is not a folder. Pass data_dir pointing at your validation "
            f"images (wnid subfolders, or images plus {LABELS_CSV})."
        )
    if not any(root.iterdir()):
        raise DataFormatError(f"ImageNet folder {root} is empty.")
    for folder in (root, root / "val"):
        if (folder / LABELS_CSV).is_file():
            samples = _flat_samples(folder)
            break
        if folder.is_dir() and any(d.is_dir() and _WNID.fullmatch(d.name) for d in folder.iterdir()):
            samples = _image_folder_samples(folder)
            break
    else:
        raise DataFormatError(
            f"{root} holds neither {LABELS_CSV} nor wnid class subfolders (n01440764/, ...), and has no val/ "
            "subfolder that does."
        )
    samples.sort(key=lambda s: (s[0], s[2]))
    return [(file, label) for _, file, label in samples]


def _decode(path: Path, transform: Callable[[Image.Image], Image.Image]) -> np.ndarray:
    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB")  # grayscale, CMYK, palette and alpha images, as torchvision's loader does
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataFormatError(f"cannot decode image {path}: {e}") from e
    return np.array(transform(rgb), dtype=np.uint8)  # a writable copy, which torch.from_numpy wants


def imagenet_size(data_dir: str | os.PathLike[str]) -> int:
    """How many validation images the folder holds (listed and labelled, not decoded)."""
    return len(_list_samples(Path(data_dir)))


def load_imagenet(
    n_examples: int | None,
    data_dir: str | os.PathLike[str],
    preprocessing: str | None = "Res256Crop224",
    *,
    seed: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ImageNet images ``x`` (float32 [N,3,S,S] in [0,1]), labels ``y`` (int64) and dataset ``indices``.

    ``preprocessing`` is a RobustBench preset: "Res256Crop224" (S=224, the default), "BicubicRes256Crop224",
    "Res224", "Crop288" (S=288, centre crop without resizing, zero-padded if smaller) or "none" (the images as
    they are, which then must all have one size). Subsets follow :func:`select_indices`: the first N in file-name
    order with ``seed=None``, else N drawn at random, returned in increasing index order.
    """
    key = "none" if preprocessing is None else preprocessing
    if key not in PREPROCESSINGS:
        raise ValueError(f"unknown preprocessing {preprocessing!r}; known presets: {', '.join(PREPROCESSINGS)}.")
    transform = PREPROCESSINGS[key]
    samples = _list_samples(Path(data_dir))
    idx = select_indices(len(samples), n_examples, seed=seed)
    x: torch.Tensor | None = None
    for k, i in enumerate(idx):
        arr = _decode(samples[i][0], transform)
        if x is None:
            x = torch.empty((len(idx), 3, arr.shape[0], arr.shape[1]), dtype=torch.float32)
        elif arr.shape[:2] != tuple(x.shape[2:]):
            raise ValueError(
                f"{samples[i][0]} is {arr.shape[1]}x{arr.shape[0]} but {samples[idx[0]][0]} is "
                f"{x.shape[3]}x{x.shape[2]}: images of different sizes cannot be batched with preprocessing "
                f"{preprocessing!r}; use a resizing preset such as 'Res256Crop224'."
            )
        x[k] = torch.from_numpy(arr).permute(2, 0, 1).float().div_(255.0)
    assert x is not None  # select_indices never returns an empty selection
    y = torch.tensor([samples[i][1] for i in idx], dtype=torch.int64)
    return x, y, torch.from_numpy(idx)
