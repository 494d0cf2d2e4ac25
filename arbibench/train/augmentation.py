"""The training augmentation of every recipe: random crop of the 4-pixel zero-padded image and horizontal flip.

The random draws (offsets, flips) come from the run's CPU generator whatever the device, in the same order on every
device, so a recipe sees the same augmentation stream on the CPU and on a GPU; the crop itself is indexing on the
images' own device (on a GPU, no copy of the training set ever goes back to the host).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CROP_PADDING = 4


def draw_augmentation(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row offsets, column offsets, flips) of ``n`` images, drawn from ``gen`` (a CPU generator)."""
    oy = torch.randint(0, 2 * CROP_PADDING + 1, (n,), generator=gen)
    ox = torch.randint(0, 2 * CROP_PADDING + 1, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    return oy, ox, flip


def apply_augmentation(x: torch.Tensor, oy: torch.Tensor, ox: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Crop ``x`` (N, C, H, W, any dtype and device) at the padded offsets and flip where ``flip`` is set. Written
    without boolean-mask indexing, which would make a GPU wait for the host."""
    n, c, h, w = x.shape
    dev = x.device
    oy, ox, flip = oy.to(dev, non_blocking=True), ox.to(dev, non_blocking=True), flip.to(dev, non_blocking=True)
    padded = F.pad(x, (CROP_PADDING,) * 4)
    rows = (oy[:, None] + torch.arange(h, device=dev))[:, None, :, None]
    cols = (ox[:, None] + torch.arange(w, device=dev))[:, None, None, :]
    batch = torch.arange(n, device=dev)[:, None, None, None]
    out = padded[batch, torch.arange(c, device=dev)[None, :, None, None], rows, cols]
    return torch.where(flip[:, None, None, None], out.flip(-1), out)


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 32x32 crop of the 4-pixel zero-padded image and random horizontal flip (uint8 in, uint8 out)."""
    return apply_augmentation(x, *draw_augmentation(x.shape[0], gen))
