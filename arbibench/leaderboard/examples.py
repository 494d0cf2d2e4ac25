"""Adversarial examples for a model page: clean, adversarial and amplified-perturbation PNGs from a card's npz.

The perturbation image maps zero change to mid-grey and stretches each example's largest change to the full range,
so an 8/255 perturbation is visible; its real size is stated beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from arbibench.leaderboard.cards import CardError

MAX_EXAMPLES = 12
MIN_SIDE_PX = 128
ARRAYS = ("x_clean", "x_adv", "y", "pred_clean", "pred_adv")


@dataclass(frozen=True)
class ExampleImages:
    """One example's PNG paths (relative to the site) and what the model said about it."""

    clean: str
    adv: str
    perturbation: str
    label: int
    pred_clean: int
    pred_adv: int
    linf_255: int
    amplification: float


@dataclass(frozen=True)
class ExampleSet:
    attack: str
    items: tuple[ExampleImages, ...]
    total: int


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise CardError(path, None, f"is not a readable .npz file ({e})") from None
    for key in (*ARRAYS, "attack"):
        if key not in arrays:
            raise CardError(path, key, f"is missing (the examples file needs {', '.join(ARRAYS)} and attack)")
    for key in ("x_clean", "x_adv"):
        x = arrays[key]
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1] not in (1, 3):
            raise CardError(path, key, f"expected uint8 N x C x H x W with C = 1 or 3, got {x.dtype} {x.shape}")
    n = arrays["x_clean"].shape[0]
    if arrays["x_adv"].shape != arrays["x_clean"].shape:
        raise CardError(path, "x_adv", f"shape {arrays['x_adv'].shape} differs from x_clean {arrays['x_clean'].shape}")
    for key in ("y", "pred_clean", "pred_adv"):
        v = arrays[key]
        if not np.issubdtype(v.dtype, np.integer) or v.shape != (n,):
            raise CardError(path, key, f"expected {n} integers (one per image), got {v.dtype} {v.shape}")
    if arrays["attack"].dtype.kind != "U" or arrays["attack"].size != 1:
        raise CardError(path, "attack", "expected the attack name as one string")
    return arrays


def _to_image(chw: np.ndarray, scale: int) -> Image.Image:
    hwc = np.ascontiguousarray(chw.transpose(1, 2, 0))
    img = Image.fromarray(hwc[:, :, 0] if hwc.shape[2] == 1 else hwc)
    return img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST) if scale > 1 else img


def write_examples(npz: Path, folder: Path, site_root: Path) -> ExampleSet:
    """Write up to :data:`MAX_EXAMPLES` triples of PNGs into ``folder``; paths come back relative to ``site_root``."""
    arrays = _read(npz)
    x_clean, x_adv = arrays["x_clean"], arrays["x_adv"]
    n = x_clean.shape[0]
    scale = max(1, math.ceil(MIN_SIDE_PX / min(x_clean.shape[2], x_clean.shape[3])))
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for i in range(min(n, MAX_EXAMPLES)):
        delta = x_adv[i].astype(np.int16) - x_clean[i].astype(np.int16)
        linf = int(np.abs(delta).max())
        gain = 127.0 / max(linf, 1)
        pert = np.clip(np.rint(128 + delta * gain), 0, 255).astype(np.uint8)
        paths = []
        for kind, chw in (("clean", x_clean[i]), ("adv", x_adv[i]), ("pert", pert)):
            target = folder / f"{i:02d}_{kind}.png"
            _to_image(chw, scale).save(target, format="PNG", optimize=True)
            paths.append(target.relative_to(site_root).as_posix())
        items.append(
            ExampleImages(
                clean=paths[0],
                adv=paths[1],
                perturbation=paths[2],
                label=int(arrays["y"][i]),
                pred_clean=int(arrays["pred_clean"][i]),
                pred_adv=int(arrays["pred_adv"][i]),
                linf_255=linf,
                amplification=gain,
            )
        )
    return ExampleSet(str(arrays["attack"].reshape(())), tuple(items), n)
