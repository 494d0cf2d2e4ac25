"""Per-sample attack losses (higher = closer to a misclassification), selectable by name in attack configs."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy [N]: the loss of Goodfellow et al. (2015) and Madry et al. (2018)."""
    return F.cross_entropy(logits, y, reduction="none")


def margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample CW margin [N]: best other logit minus the true one (Carlini & Wagner 2017); > 0 means fooled.

    Unlike cross-entropy it does not saturate on very confident logits, which BNNs with large scales often produce.
    """
    true = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf"))
    return others.amax(dim=1) - true


LOSSES: dict[str, LossFn] = {"ce": cross_entropy, "margin": margin}


def get_loss(name: str) -> LossFn:
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known: {', '.join(LOSSES)}")
    return LOSSES[name]
