"""Memory layout of a loaded model: channels-last for full-precision networks on the CPU.

The full protocol spends most of its hours in forward and backward passes (AutoAttack on an adversarially trained
network runs 9 x 100 APGD-T and FAB-T steps on every image still standing). On the CPU, oneDNN runs a float ResNet's
convolutions 1.5-2x faster on channels-last tensors (``benchmarks/channels_last.py``), and a full-precision
network's logits move by float round-off only. A BNN stays in NCHW: an activation that round-off moves across zero
changes sign, its logits move by whole units, and its gain is under 1.1x.

A channels-last model takes NCHW inputs as they are; the gradients it returns for them are channels-last strided,
which element-wise attack code does not notice.
"""

from __future__ import annotations

import torch
from torch import nn

FLOAT_METHODS = frozenset({"fp"})


def preferred_memory_format(method: str, device: str | torch.device) -> torch.memory_format:
    """channels-last for a float network on the CPU (measured faster), else the contiguous NCHW default."""
    if method in FLOAT_METHODS and torch.device(device).type == "cpu":
        return torch.channels_last
    return torch.contiguous_format


def in_layout(model: nn.Module, channels_last: bool) -> nn.Module:
    """``model`` (in place) in channels-last, or in the contiguous NCHW default."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model.to(memory_format=fmt)  # type: ignore[call-overload]  # torch's stubs omit memory_format
    return model


def with_layout(model: nn.Module, method: str, device: str | torch.device,
                channels_last: bool | None = None) -> nn.Module:
    """``model`` (in place) in ``channels_last`` layout, or in the preferred one when ``channels_last`` is None."""
    if channels_last is None:
        channels_last = preferred_memory_format(method, device) == torch.channels_last
    return in_layout(model, channels_last)
