"""Clean accuracy of a model in training: per epoch on held-out images, once at the end on the test set."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 500) -> float:
    """Clean accuracy of ``model`` on uint8 NCHW images."""
    model.eval()
    correct = 0
    for i in range(0, len(y), batch_size):
        xb = torch.from_numpy(x[i : i + batch_size]).float().div_(255)
        correct += (model(xb).argmax(1) == torch.from_numpy(y[i : i + batch_size])).sum().item()
    return correct / len(y)


def final_accuracy(model: torch.nn.Module, x_test: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    """The summary's accuracy fields, which ``export_checkpoint`` copies into the model card."""
    return {
        "clean_acc": evaluate(model, x_test, y_test),
        "clean_acc_n_examples": len(y_test),
        "clean_acc_first500": evaluate(model, x_test[:500], y_test[:500]),
        "torch_threads": torch.get_num_threads(),
    }
