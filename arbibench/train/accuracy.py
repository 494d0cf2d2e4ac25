"""Clean accuracy of a model in training: per epoch on held-out images, once at the end on the test set."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def as_tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A numpy array as a tensor without a copy; a tensor as it is (on its own device)."""
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


@torch.no_grad()
def top1_accuracy(model: torch.nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                  batch_size: int = 500) -> float:
    """Clean accuracy of ``model`` on uint8 NCHW images, computed on the model's device (images resident there are
    not copied; counts stay on the device until the end)."""
    model.eval()
    device = next(model.parameters()).device
    xs, ys = as_tensor(x), as_tensor(y)
    if len(ys) == 0:
        raise ValueError("no images to measure the accuracy on")
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for i in range(0, len(ys), batch_size):
        xb = xs[i : i + batch_size].to(device, non_blocking=True).float().div_(255)
        correct += (model(xb).argmax(1) == ys[i : i + batch_size].to(device, non_blocking=True)).sum()
    return int(correct.item()) / len(ys)


def final_accuracy(model: torch.nn.Module, x_test: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    """The summary's accuracy fields, which ``export_checkpoint`` copies into the model card."""
    return {
        "clean_acc": top1_accuracy(model, x_test, y_test),
        "clean_acc_n_examples": len(y_test),
        "clean_acc_first500": top1_accuracy(model, x_test[:500], y_test[:500]),
        "torch_threads": torch.get_num_threads(),
    }
