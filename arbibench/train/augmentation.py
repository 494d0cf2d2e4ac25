"""The training augmentation of every recipe: random crop of the 4-pixel zero-padded image and horizontal flip."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 32x32 crop of the 4-pixel zero-padded image and random horizontal flip (uint8 in, uint8 out)."""
    n = x.shape[0]
    padded = F.pad(x, (4, 4, 4, 4))
    oy = torch.randint(0, 9, (n,), generator=gen)
    ox = torch.randint(0, 9, (n,), generator=gen)
    ar = torch.arange(32)
    rows = (oy[:, None] + ar)[:, None, :, None]
    cols = (ox[:, None] + ar)[:, None, None, :]
    out = padded[torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None], rows, cols]
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out
