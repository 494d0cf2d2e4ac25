"""Checks on what a user hands to an evaluation: images, labels, and the model itself.

Each problem raises one error naming it and the fix. Model properties that make a number unreliable without making
it wrong (randomness, probability outputs) become flags stored with the result, with a stated meaning.
"""

from __future__ import annotations

import torch
from torch import nn

from arbibench.machine import full_float32

FLAG_MEANINGS = {
    "randomized_model": "Two identical forward passes gave different logits: the model is randomized, so attacks "
    "see a moving target and ACC* may be overstated. Evaluate with EOT or make the model deterministic.",
    "probability_outputs": "The outputs look like probabilities (non-negative, rows sum to 1), not logits: "
    "cross-entropy on them has vanishing gradients. Remove the final softmax.",
}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The evaluation device, checked once up front: ``None`` means CPU; an unknown or absent device is a ValueError.

    ``torch.device("cuda")`` alone does not check that this torch build or machine has CUDA; the first ``.to()``
    would then fail deep inside the run with ``AssertionError: Torch not compiled with CUDA enabled``.
    """
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r} ({e}); use cpu, cuda, cuda:0, ... or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA support" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"device {device!r} is not available: {why}; use --device cpu (device='cpu')")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} is not available: {torch.cuda.device_count()} CUDA device(s) visible, "
                f"numbered from 0; use cuda:0 .. cuda:{torch.cuda.device_count() - 1}"
            )
        full_float32()
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} is not available on this machine; use --device cpu (device='cpu')")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r} is not supported by arbibench; use cpu, cuda, cuda:N or mps")
    return dev


def check_finite_logits(logits: torch.Tensor, where: str) -> None:
    """Non-finite logits mean a broken model: argmax of NaN is an arbitrary class, not a prediction."""
    if not torch.isfinite(logits).all():
        bad = int((~torch.isfinite(logits)).any(1).sum())
        raise ValueError(
            f"the model returned NaN or infinite logits for {bad} of {len(logits)} images ({where}); a non-finite "
            "output is a broken model, not a robustness result: fix the model (e.g. a division by zero, an "
            "uninitialised or overflowing layer) before evaluating it"
        )


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
    try:
        out1 = model(x)
    except RuntimeError as e:  # e.g. a tensor the model keeps outside its parameters and buffers, on another device
        raise ValueError(
            f"the model failed on a batch of {x.shape[0]} images of shape {tuple(x.shape[1:])} on {x.device}: {e}. "
            "It must accept [N, C, H, W] float images in [0, 1] and keep every tensor it uses as a registered "
            "parameter or buffer, so that .to(device) moves it"
        ) from e
    if not isinstance(out1, torch.Tensor) or out1.ndim != 2 or out1.shape[0] != x.shape[0]:
        shape = tuple(out1.shape) if isinstance(out1, torch.Tensor) else type(out1).__name__
        raise ValueError(f"the model must return logits of shape [N, classes]; for {x.shape[0]} images it gave {shape}")
    if out1.shape[1] < 2:
        raise ValueError(f"the model returns {out1.shape[1]} output per image; a classifier needs at least 2 logits")
    check_finite_logits(out1, "model check on the first images")
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
    """Predicted labels of ``x`` (on CPU), computed in batches on ``device``; non-finite logits are an error."""
    labels = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device))
        check_finite_logits(logits, f"images {i}..{i + len(logits) - 1}")
        labels.append(logits.argmax(1).cpu())
    return torch.cat(labels)


def clean_accuracy(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 500,
    device: str | torch.device | None = None,
) -> float:
    """Fraction of ``x`` that ``model`` classifies as ``y`` (RobustBench's ``clean_accuracy``)."""
    check_images(x, y)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    device = resolve_device(device) if device is not None else next(model.parameters()).device
    model.eval()
    return (predict(model, x, batch_size, device) == y.cpu()).float().mean().item()
