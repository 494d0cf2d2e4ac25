"""Held-out selection: a validation split of the training set picks epochs and checkpoints, never the test set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.models.zoo import CHECKPOINT_DIR, load_card, load_model
from arbibench.train.accuracy import top1_accuracy


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
    return not card.recipe.get("val_examples") or bool((card.validation or {}).get("optimistic"))


def best_val_epoch(history: list[dict[str, Any]]) -> int:
    """The (1-based) epoch of the best validation accuracy; the earliest on a tie."""
    accs = [h["val_acc"] for h in history]
    return 1 + max(range(len(accs)), key=lambda i: (accs[i], -i))


def shipped_heldout(name: str, n_val: int, data_dir: str | Path | None, zoo_dir: str | Path | None) -> dict[str, Any]:
    """The shipped zoo model ``name`` measured on a run's held-out images (the last ``n_val`` training images), for
    a run that would replace it without having started from it: ``{"val_acc": ..., "trained_on_heldout": ...}``, or
    ``{}`` when nothing ships under that name. ``trained_on_heldout``: the shipped model's own training saw those
    images (its card holds no held-out split, or says its figures are optimistic), so its figure flatters it."""
    try:
        card = load_card(name, Path(zoo_dir) if zoo_dir is not None else CHECKPOINT_DIR)
        model = load_model(name, model_dir=zoo_dir)
    except (FileNotFoundError, ValueError):
        return {}
    x, y = read_cifar10_arrays("train", data_dir)
    _, _, x_val, y_val = split_validation(x, y, n_val)
    trained_on = not card.recipe.get("val_examples") or bool((card.validation or {}).get("optimistic"))
    return {"val_acc": top1_accuracy(model, x_val, y_val), "trained_on_heldout": trained_on, "sha256": card.sha256}
