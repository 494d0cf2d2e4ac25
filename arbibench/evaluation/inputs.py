"""Checks on what a user hands to an evaluation: images, labels, and the model itself.

Each problem raises one error naming it and the fix. Model properties that make a number unreliable without making
it wrong (randomness, probability outputs) become flags stored with the result, with a stated meaning.
"""

from __future__ import annotations

import torch
from torch import nn

FLAG_MEANINGS = {
    "randomized_model": "Two identical forward passes gave different logits: the model is randomized, so attacks "
    "see a moving target and ACC* may be overstated. Evaluate with EOT or make the model deterministic.",
    "probability_outputs": "The outputs look like probabilities (non-negative, rows sum to 1), not logits: "
    "cross-entropy on them has vanishing gradients. Remove the final softmax.",
}


def check_images(x: torch.Tensor, y: torch.Tensor) -> None:
    """Images: float NCHW in [0, 1]; labels: int64 of the same length."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("x and y must be torch tensors (images float [N,C,H,W] in [0,1], labels int64 [N])")
    if x.ndim != 4:
        raise ValueError(f"images must be 4-D [N, C, H, W], got shape {tuple(x.shape)}; add a batch dimension")
    if not x.is_floating_point():
        raise ValueError(f"images must be floating point in [0, 1], got dtype {x.dtype}; divide uint8 images by 255")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"labels must be 1-D with one label per image: images {tuple(x.shape)}, labels {tuple(y.shape)}"
        )
    if y.is_floating_point() or y.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    if x.shape[0] == 0:
        raise ValueError("no images to evaluate (N = 0)")
    if not torch.isfinite(x).all():
        raise ValueError("images contain NaN or infinite values")
    lo, hi = x.min().item(), x.max().item()
    if lo < 0 or hi > 1:
        raise ValueError(
            f"images must lie in [0, 1] (got min {lo:.4g}, max {hi:.4g}); arbibench attacks work in pixel space, so "
            "pass unnormalised images and put the normalisation inside the model"
        )


def check_labels(y: torch.Tensor, num_classes: int) -> None:
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(
            f"labels must lie in 0..{num_classes - 1} (the model has {num_classes} outputs); got {lo}..{hi}"
        )


@torch.no_grad()
def check_model(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[str, str]]:
    """Put ``model`` in eval mode, check its outputs on a few images; return (number of classes, flags)."""
    model.eval()
    out1 = model(x)
    if not isinstance(out1, torch.Tensor) or out1.ndim != 2 or out1.shape[0] != x.shape[0]:
        shape = tuple(out1.shape) if isinstance(out1, torch.Tensor) else type(out1).__name__
        raise ValueError(f"the model must return logits of shape [N, classes]; for {x.shape[0]} images it gave {shape}")
    if out1.shape[1] < 2:
        raise ValueError(f"the model returns {out1.shape[1]} output per image; a classifier needs at least 2 logits")
    flags = {}
    out2 = model(x)
    if not torch.equal(out1, out2):
        flags["randomized_model"] = FLAG_MEANINGS["randomized_model"]
    if (out1 >= 0).all() and torch.allclose(out1.sum(1), torch.ones(len(out1), device=out1.device), atol=1e-4):
        flags["probability_outputs"] = FLAG_MEANINGS["probability_outputs"]
    return int(out1.shape[1]), flags


@torch.no_grad()
def predict(
    model: nn.Module, x: torch.Tensor, batch_size: int = 500, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """Predicted labels of ``x`` (on CPU), computed in batches on ``device``."""
    return torch.cat([model(x[i : i + batch_size].to(device)).argmax(1).cpu() for i in range(0, len(x), batch_size)])


def clean_accuracy(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 500,
    device: str | torch.device | None = None,
) -> float:
    """Fraction of ``x`` that ``model`` classifies as ``y`` (RobustBench's ``clean_accuracy``)."""
    check_images(x, y)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    return (predict(model, x, batch_size, device) == y.cpu()).float().mean().item()
