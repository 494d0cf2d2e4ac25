"""Per-sample attack losses (higher = closer to a misclassification), selectable by name in attack configs.

Every loss maps logits [N, K] (and labels [N]) to a loss per sample [N] that an attack MAXIMISES. Any loss can be
taken on tempered logits ``logits / T`` (:func:`with_temperature`, or ``get_loss(name, temperature=T)``); attacks
carry ``T`` in their config as ``loss_temperature`` (1.0, i.e. plain logits, by default). A temperature above 1
softens a saturated softmax, which is where cross-entropy gradients of very confident BNNs vanish.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Keeps the DLR denominators away from 0 when the top logits tie (the constant of Croce & Hein's reference code).
DLR_EPS = 1e-12


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy [N]: the loss of Goodfellow et al. (2015) and Madry et al. (2018)."""
    return F.cross_entropy(logits, y, reduction="none")


def margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample CW margin [N]: best other logit minus the true one (Carlini & Wagner 2017); > 0 means fooled.

    Unlike cross-entropy it does not saturate on very confident logits, which BNNs with large scales often produce.
    """
    true = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf"))
    return others.amax(dim=1) - true


def _descending(logits: torch.Tensor, needed: int, loss: str) -> torch.Tensor:
    if logits.dim() != 2 or logits.shape[1] < needed:
        raise ValueError(f"the {loss} loss needs logits [N, K] with K >= {needed} classes, got {tuple(logits.shape)}")
    return logits.sort(dim=1, descending=True).values


def dlr(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample DLR loss [N] (Croce & Hein, ICML 2020): -(z_y - max_{i!=y} z_i) / (z_pi1 - z_pi3 + 1e-12).

    ``pi`` sorts the logits in decreasing order. Invariant to shifting and to positive scaling of the logits, so it
    neither saturates like cross-entropy nor depends on the (arbitrary) scale of a BNN's logits. Needs K >= 3.
    """
    top = _descending(logits, 3, "DLR")
    return margin(logits, y) / (top[:, 0] - top[:, 2] + DLR_EPS)


def targeted_dlr(logits: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample targeted DLR [N] (Croce & Hein, ICML 2020): -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4)/2 + 1e-12).

    Maximising it pushes the target logit ``z_t`` above the true one. Shift and scale invariant; needs K >= 4.
    """
    top = _descending(logits, 4, "targeted DLR")
    true = logits.gather(1, y[:, None]).squeeze(1)
    tgt = logits.gather(1, target[:, None]).squeeze(1)
    return (tgt - true) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + DLR_EPS)


LOSSES: dict[str, LossFn] = {"ce": cross_entropy, "margin": margin, "dlr": dlr}


def check_temperature(temperature: Any) -> float:
    """A logit temperature must be a finite number > 0 (dividing by it must keep the logits' order)."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"loss_temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def with_temperature(loss: Callable[..., torch.Tensor], temperature: float) -> Callable[..., torch.Tensor]:
    """``loss`` evaluated on ``logits / temperature`` (any further arguments, e.g. a target, passed through)."""
    t = check_temperature(temperature)
    if t == 1.0:
        return loss

    def tempered(logits: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:
        return loss(logits / t, *args)

    tempered.__name__ = f"{getattr(loss, '__name__', 'loss')}_T{t:g}"
    return tempered


def get_loss(name: str, temperature: float = 1.0) -> LossFn:
    """A loss by name, on logits divided by ``temperature`` (1.0: the logits as they are)."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known: {', '.join(LOSSES)}")
    return with_temperature(LOSSES[name], temperature)
