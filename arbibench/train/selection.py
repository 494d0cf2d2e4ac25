"""Held-out selection: a validation split of the training set picks epochs and checkpoints, never the test set."""

from __future__ import annotations

from typing import Any

import numpy as np

from arbibench.models.zoo import CHECKPOINT_DIR, load_card


def split_validation(
    x_train: np.ndarray, y_train: np.ndarray, n_val: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train x, train y, validation x, validation y): the last ``n_val`` training images are the validation split,
    a fixed slice so every run, resumed or not, holds out the same images."""
    if n_val >= len(y_train):
        raise ValueError(f"val_examples={n_val} leaves no training images out of {len(y_train)}")
    if n_val == 0:
        return x_train, y_train, x_train[:0], y_train[:0]
    cut = len(y_train) - n_val
    return x_train[:cut], y_train[:cut], x_train[cut:], y_train[cut:]


def validation_optimistic(init_from: str | None) -> bool:
    """Whether the starting checkpoint may have trained on the validation images (then its figures flatter it): it
    trained without holding them out, or descends from one that did (its card says its own figures are optimistic)."""
    if init_from is None:
        return False
    try:
        card = load_card(init_from, CHECKPOINT_DIR)
    except (FileNotFoundError, ValueError):
        return True  # a file of unknown history
    return not card.get("recipe", {}).get("val_examples") or bool((card.get("validation") or {}).get("optimistic"))


def best_val_epoch(history: list[dict[str, Any]]) -> int:
    """The (1-based) epoch of the best validation accuracy; the earliest on a tie."""
    accs = [h["val_acc"] for h in history]
    return 1 + max(range(len(accs)), key=lambda i: (accs[i], -i))
