"""How a training run computes, apart from what it computes: device, memory layout, compilation, autocast.

None of these is part of the recipe (the recipe fixes the checkpoint up to the order of float sums); each epoch's
record says how it ran. On a GPU the training set and the held-out split stay resident as uint8, the augmentation
runs there, and no step waits for the host, so an epoch of a ResNet-20 costs what the GPU needs and no more.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from arbibench.machine import full_float32

AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # reduce-overhead: CUDA graphs on a GPU


class TimeLimitReached(Exception):  # noqa: N818 - a stop, not an error: the run resumes from its checkpoint
    """The run stopped at its time limit after a finished, checkpointed epoch; the same call resumes it."""

    def __init__(self, epochs_done: int, epochs: int, out: str) -> None:
        self.epochs_done, self.epochs, self.out = epochs_done, epochs, out
        super().__init__(
            f"stopped at the time limit after epoch {epochs_done} of {epochs}; the checkpoint is in {out}: run the "
            "same command again to resume"
        )


@dataclass(frozen=True)
class Execution:
    """Where and how the run computes. ``autocast`` ("bf16") applies to the training steps only: every measurement
    (held-out accuracy, BatchNorm re-estimation, the test set at the end) runs in float32, and the final weights are
    measured on the CPU, as every shipped checkpoint is."""

    device: str = "cpu"
    channels_last: bool = False
    compile_model: bool = False
    compile_mode: str = "default"
    autocast: str | None = None
    time_limit_s: float | None = None  # stop after the epoch that would end past this many seconds of this call

    def __post_init__(self) -> None:
        if self.autocast is not None and self.autocast not in AUTOCAST_DTYPES:
            raise ValueError(f"unknown autocast {self.autocast!r}; use {', '.join(AUTOCAST_DTYPES)} or none")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {self.compile_mode!r}; known: {', '.join(COMPILE_MODES)}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:  # NaN too
            raise ValueError(f"time_limit_s must be a positive number of seconds, got {self.time_limit_s:g}")
        resolve_device(self.device)

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def autocast_context(self) -> AbstractContextManager[object]:
        """The training step's autocast (a no-op without ``autocast``)."""
        if self.autocast is None:
            return nullcontext()
        return torch.autocast(device_type=self.torch_device.type, dtype=AUTOCAST_DTYPES[self.autocast])

    def record(self) -> dict[str, object]:
        """What each epoch's record says about how it ran."""
        return {"device": str(self.torch_device), "channels_last": self.channels_last, "compiled": self.compile_model,
                "compile_mode": self.compile_mode if self.compile_model else None, "autocast": self.autocast}


def float32_precision(device: torch.device) -> None:
    """Train in the float32 the recipe names: on CUDA, cuDNN computes float32 convolutions in TF32 by default (a
    10-bit mantissa), the kind of rounding that cost ``resnet20_xnor`` held-out accuracy under bf16 autocast
    (docs/benchmarks/training.md). Lower precision is asked for with ``autocast``, never taken silently."""
    if device.type == "cuda":
        full_float32()


def resolve_device(name: str) -> torch.device:
    """``name`` as a torch device that this machine has, else one error that names the fix."""
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"unknown device {name!r} ({e}); use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r}: this machine has no CUDA GPU that torch can use; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    elif device.type not in ("cpu", "mps"):
        raise ValueError(f"device {name!r}: training runs on cpu or cuda")
    return device
