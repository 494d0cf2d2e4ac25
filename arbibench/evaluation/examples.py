"""A few adversarial examples of a model, for its leaderboard page (``<name>_examples.npz`` beside its card).

The examples are re-computed on the first correctly classified images (cheap) rather than kept from the evaluation,
so the store stays small; :mod:`arbibench.leaderboard.examples` reads the file back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from arbibench.attacks import ThreatModel, get_attack
from arbibench.files import atomic_write

#: The attack whose examples a model page shows.
EXAMPLES_ATTACK = "pgd"


def _uint8(t: torch.Tensor) -> np.ndarray:
    return (t.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).numpy()


def save_examples(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    attack: str,
    threat: ThreatModel,
    path: Path,
    *,
    n: int = 8,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> Path:
    """Attack the first ``n`` of ``x[:4n]`` that ``model`` classifies correctly and write an ``.npz`` (uint8 clean and
    adversarial images, labels, both predictions, the attack's name) atomically; returns ``path``.

    Predictions are those of the float adversarial images; every adversarial image is verified against ``threat``.
    """
    device = torch.device(device or "cpu")
    model = model.to(device).eval()
    with torch.no_grad():
        pred = model(x[: 4 * n].to(device)).argmax(1).cpu()
    ok = (pred == y[: 4 * n]).nonzero().flatten()[:n]
    xs, ys = x[ok], y[ok]
    x_adv = get_attack(attack)(model, xs.to(device), ys.to(device), threat, torch.Generator().manual_seed(seed))
    threat.verify(x_adv, xs.to(device))
    with torch.no_grad():
        pred_adv = model(x_adv).argmax(1).cpu()
    arrays = {
        "x_clean": _uint8(xs), "x_adv": _uint8(x_adv), "y": ys.numpy().astype(np.int64), "pred_clean": pred[ok].numpy(),
        "pred_adv": pred_adv.numpy().astype(np.int64), "attack": np.array(attack),
    }
    return atomic_write(lambda f: np.savez_compressed(f, **arrays), path, fault="examples.write")
