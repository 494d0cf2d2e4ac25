"""What every evaluation of one run shares besides the model, its images and its attacks, in one frozen value.

A plan (:func:`arbibench.evaluation.plan.plan_evaluation`, the protocol's ``plan_model`` and ``plan_sweep``) takes
these settings whole, so an option added here reaches every command that plans, instead of travelling as one more
keyword through each signature. The public functions (``benchmark``, ``evaluate``, ``run_protocol``, ...) keep
their keyword arguments and build the settings inside. Torch-free, so a command line can build one before torch
loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbibench.inference import Inference

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RunSettings:
    """Dataset name, attack seed, store batch size, device, the network that answers (:class:`Inference`) and
    whether black-box store batches are pooled (same results either way). The store keys follow from all but the
    device and the pooling."""

    dataset: str = "custom"
    seed: int = 0
    batch_size: int = 200
    device: str | torch.device | None = None  # None: the CPU (checked when the plan resolves it)
    inference: Inference = Inference.SIMULATION
    pool: bool = True  # black-box attacks run several store batches per forward batch

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        # a user's string becomes the enum here, once: every plan and store key then sees the same value
        object.__setattr__(self, "inference", Inference.parse(self.inference))


__all__ = ["RunSettings"]
