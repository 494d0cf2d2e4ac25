"""Fast adversarial training (Wong et al., 2020): FGSM from a random start, and the catastrophic-overfitting check."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks.pgd import PGD
from arbibench.attacks.threat import Linf
from arbibench.train.recipes import Recipe


def fgsm_random_start(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, step: float, gen: torch.Generator
) -> torch.Tensor:
    """Wong et al.'s training example: one signed-gradient step of size ``step`` from a uniform start in the Linf
    ball, projected back onto the ball and [0, 1]. The model stays in its current (training) mode, as in the paper.
    """
    delta = (torch.rand(x.shape, generator=gen) * 2 - 1).mul_(eps).to(x.device)  # drawn on the CPU on every device
    delta = ((x + delta).clamp_(0, 1) - x).requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(x + delta), y), delta)
    delta = (delta.detach() + step * grad.sign()).clamp_(-eps, eps)
    return (x + delta).clamp_(0, 1)


def robust_check(model: nn.Module, x: np.ndarray, y: np.ndarray, eps: float, seed: int = 0) -> float:
    """PGD-10 accuracy at Linf ``eps`` of the deployed (eval-mode) model: the catastrophic-overfitting check."""
    model.eval()
    device = next(model.parameters()).device
    xb, yb = torch.from_numpy(x).to(device).float().div_(255), torch.from_numpy(y).to(device).long()
    x_adv = PGD(steps=10)(model, xb, yb, Linf(eps), torch.Generator().manual_seed(seed))
    with torch.no_grad():
        accuracy: float = (model(x_adv).argmax(1) == yb).float().mean().item()
    return accuracy


def catastrophic_overfitting_check(recipe: Recipe, history: list[dict[str, Any]], n_images: int) -> dict[str, Any]:
    """The card's record of the check: PGD-10 accuracy per epoch, and whether training stopped on a collapse."""
    accs = [h["pgd10_acc"] for h in history]
    return {
        "attack": "pgd (10 steps, step eps/4, random start), eval mode",
        "eps": recipe.adv_eps,
        "images": f"the last {n_images} CIFAR-10 test images",
        "pgd10_acc_per_epoch": accs,
        "best_epoch": 1 + max(range(len(accs)), key=accs.__getitem__),
        "catastrophic_overfitting": any(h.get("catastrophic_overfitting") for h in history),
        "rule": "stop when PGD-10 accuracy falls below half of the best epoch's; keep the best epoch's weights",
    }
