"""A picture grid of CIFAR-10-C: one row per corruption, the clean image then severities 1 to 5, a few images wide."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.data.cifar10c import CORRUPTIONS, SEVERITIES, cifar10c_dir, read_cell, read_manifest
from arbibench.files import atomic_write


def corruption_grid(
    path: str | os.PathLike[str],
    data_dir: str | os.PathLike[str] | None = None,
    *,
    images: Sequence[int] = (0, 1),
    corruptions: Sequence[str] = CORRUPTIONS,
    scale: int = 2,
) -> Path:
    """Write a PNG of the CIFAR-10-C folder under ``data_dir``: the test images ``images`` (positions in the
    folder) clean and at each severity, for each corruption; the title says whether the data is regenerated."""
    folder = cifar10c_dir(data_dir)
    manifest = read_manifest(folder)
    x, _ = read_cifar10_arrays("test", data_dir)
    tile, pad, label_w, head = 32 * scale, 2, 120, 34
    cols = len(images) * (1 + len(SEVERITIES))
    width = label_w + cols * (tile + pad) + pad * len(images) * 2
    height = head + len(corruptions) * (tile + pad) + pad
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    what = (f"regenerated CIFAR-10-C (arbibench, seed {manifest['seed']})" if manifest is not None
            else "official CIFAR-10-C")
    draw.text((4, 2), f"{what}: clean, then severity 1-5", fill="black")
    for j, _ in enumerate(images):
        x0 = label_w + j * ((1 + len(SEVERITIES)) * (tile + pad) + 2 * pad)
        for k, name in enumerate(["clean", *map(str, SEVERITIES)]):
            draw.text((x0 + k * (tile + pad) + tile // 2 - 10, 18), name, fill="black")
    need = max(images) + 1
    for r, name in enumerate(corruptions):
        y0 = head + r * (tile + pad)
        draw.text((4, y0 + tile // 2 - 6), name, fill="black")
        cells = [read_cell(name, s, data_dir, need)[0] for s in SEVERITIES]
        for j, i in enumerate(images):
            x0 = label_w + j * ((1 + len(SEVERITIES)) * (tile + pad) + 2 * pad)
            pics = [x[i].transpose(1, 2, 0)] + [c[i] for c in cells]
            for k, pic in enumerate(pics):
                img = Image.fromarray(np.ascontiguousarray(pic)).resize((tile, tile), Image.Resampling.NEAREST)
                canvas.paste(img, (x0 + k * (tile + pad), y0))
    return atomic_write(lambda f: canvas.save(f, format="PNG", optimize=True), path)
