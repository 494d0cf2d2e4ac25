"""Does robustness measured on float inputs hold on the 8-bit images a deployed network is fed?

A camera, a PNG file and a deployed network's first layer all see pixels k/255. Below 1/255 no 8-bit image differs
from the clean one, and at 1/255-8/255 an attacker on the grid has 3-17 values per pixel, not a continuum. BNNs flip
signs under perturbations far below one grey level, so whether their float adversarial examples survive the grid is
a measurement, not a given. Per model and eps, on the same images, attack and seed:

(a) **ACC\\* in float** and **ACC\\* on the uint8 grid** (the attack projecting onto the grid at every step, and the
    float examples rounded to the grid: an image counts as robust on the grid only if neither fools it), with Wilson
    95% intervals and the paired difference grid - float with a 95% bootstrap interval over images;
(b) **survival**: the share of the float adversarial examples that still fool the model once rounded to 8 bits
    (nearest level inside the eps box), with its Wilson 95% interval.

Every example is verified against its threat model before it counts (float ones in float, rounded and grid ones on
the grid, :meth:`ThreatModel.verify`). The float column is the one ``arbibench eval`` stores for the same attack,
seed and batch size: each batch draws from the same generator. One model's check is its
:class:`~arbibench.cards.GridCheckCard`, what ``protocol grid-check`` writes and the leaderboard reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from arbibench.attacks import Attack, get_attack, get_threat_model, parse_eps
from arbibench.attacks.threat import UINT8
from arbibench.cards import GridCheckCard, GridCheckRow, Interval, Proportion
from arbibench.clock import active_clock
from arbibench.data.datasets import load_dataset
from arbibench.evaluation.batch import batch_generator
from arbibench.evaluation.bootstrap import bootstrap_image_means, percentile_interval
from arbibench.evaluation.cards import checkpoint_sha256
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.metrics import wilson_interval
from arbibench.evaluation.plan import check_grid
from arbibench.machine import computed_on
from arbibench.models.zoo import load_model

GRID_EPS = ("1/255", "2/255", "4/255", "8/255")
GRID_ATTACK = "apgd_ce"


def _wilson(successes: int, n: int) -> Proportion:
    low, high = wilson_interval(successes, n)
    return Proportion(value=successes / n, low=low, high=high)


@torch.no_grad()
def _fools(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits: torch.Tensor = model(x)
    return (logits.argmax(1) != y).cpu()


def _batch_outcomes(
    model: nn.Module, attack: Attack, eps: float, x: torch.Tensor, y: torch.Tensor, seed: int, b: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per attacked image (the correctly classified ones): fooled by the float attack, by its example rounded to
    the grid, by the attack on the grid. Every example verified on its own threat model."""
    flt, grid = get_threat_model("Linf", eps), get_threat_model("Linf", eps, UINT8)
    x_float = attack.output(model, x, y, flt, batch_generator(seed, b)).x_adv  # verified in float
    rounded = grid.round_to_grid(x_float, x)
    grid.verify(rounded, x)
    x_grid = attack.output(model, x, y, grid, batch_generator(seed, b)).x_adv  # verified on the grid
    return _fools(model, x_float, y), _fools(model, rounded, y), _fools(model, x_grid, y)


def _row(eps_text: str, clean: np.ndarray, fooled: dict[str, np.ndarray], seconds: float, seed: int
         ) -> GridCheckRow:
    """One eps' row from per-image outcomes over all images (``fooled`` False where the image was not attacked)."""
    n = len(clean)
    robust_float = clean & ~fooled["float"]
    robust_grid_attack = clean & ~fooled["grid"]
    robust_grid = robust_grid_attack & ~fooled["rounded"]
    stats = np.stack([robust_float, robust_grid]).astype(np.float64)
    diffs = bootstrap_image_means(stats, lambda m: m[:, 1] - m[:, 0], seed=seed)
    float_fooled = int(fooled["float"].sum())
    survived = int((fooled["float"] & fooled["rounded"]).sum())
    difference = percentile_interval(diffs, float(stats[1].mean() - stats[0].mean()))
    return GridCheckRow(
        eps_text=eps_text, eps=parse_eps(eps_text), n_images=n,
        acc_float=_wilson(int(robust_float.sum()), n), acc_grid=_wilson(int(robust_grid.sum()), n),
        acc_grid_attack=_wilson(int(robust_grid_attack.sum()), n),
        difference=Interval(value=difference.value, low=difference.low, high=difference.high),
        float_fooled=float_fooled, survived=survived,
        survival=_wilson(survived, float_fooled) if float_fooled else None, seconds=round(seconds, 1),
    )


def grid_check(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    attack: str | Attack = GRID_ATTACK,
    eps_values: Sequence[str] = GRID_EPS,
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
) -> tuple[Proportion, list[GridCheckRow]]:
    """Clean accuracy and one :class:`~arbibench.cards.GridCheckRow` per eps (texts such as "1/255") of ``model``
    on 8-bit images ``x``."""
    dev = resolve_device(device)
    check_grid(x, get_threat_model("Linf", 1 / 255, UINT8))  # the clean images must be 8-bit themselves
    attack_obj = get_attack(attack) if isinstance(attack, str) else attack
    model = model.to(dev).eval()
    clean = np.concatenate([
        (~_fools(model, x[s : s + batch_size].to(dev), y[s : s + batch_size].to(dev))).numpy()
        for s in range(0, len(y), batch_size)
    ])
    rows = []
    for eps_text in eps_values:
        t0 = active_clock().now()
        fooled = {k: np.zeros(len(y), dtype=bool) for k in ("float", "rounded", "grid")}
        for b, s in enumerate(range(0, len(y), batch_size)):
            pick = s + np.flatnonzero(clean[s : s + batch_size])
            if len(pick) == 0:
                continue
            xb, yb = x[pick].to(dev), y[pick].to(dev)
            outs = _batch_outcomes(model, attack_obj, parse_eps(eps_text), xb, yb, seed, b)
            for key, out in zip(("float", "rounded", "grid"), outs, strict=True):
                fooled[key][pick] = out.numpy()
        rows.append(_row(eps_text, clean, fooled, active_clock().now() - t0, seed))
    return _wilson(int(clean.sum()), len(clean)), rows


def run_grid_check(
    model_name: str,
    *,
    dataset: str = "cifar10",
    n_examples: int = 300,
    attack: str | Attack = GRID_ATTACK,
    eps_values: Sequence[str] = GRID_EPS,
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> GridCheckCard:
    """:func:`grid_check` of the zoo model ``model_name`` on the first ``n_examples`` test images, as its card."""
    dev = resolve_device(device)
    attack_obj = get_attack(attack) if isinstance(attack, str) else attack
    for eps_text in eps_values:  # every eps readable before the model is loaded
        get_threat_model("Linf", parse_eps(eps_text), UINT8)
    model = load_model(model_name, model_dir, dataset=dataset, device=dev)
    x, y, _ = load_dataset(dataset, n_examples, data_dir, None)
    clean, rows = grid_check(model, x, y, attack=attack_obj, eps_values=eps_values, seed=seed, batch_size=batch_size,
                             device=dev)
    return GridCheckCard(
        name=model_name, dataset=dataset, attack=attack_obj.config_dict(), n_images=len(y), clean_acc=clean,
        seed=seed, batch_size=batch_size, machine=computed_on(dev),
        checkpoint_sha256=checkpoint_sha256(model_name, dataset, model_dir), rows=tuple(rows),
    )
