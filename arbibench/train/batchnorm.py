"""BatchNorm re-estimation: running statistics recomputed for the final weights on augmented training images."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.files import atomic_write_json
from arbibench.models.architectures import build_model
from arbibench.models.zoo import CHECKPOINT_DIR, load_card, sha256_file
from arbibench.train.accuracy import final_accuracy, top1_accuracy
from arbibench.train.augmentation import augment
from arbibench.train.checkpoints import atomic_save_tensors, init_checkpoint
from arbibench.train.recipes import KD_BN_BATCHES, Recipe


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, images: torch.Tensor, batch_size: int = 128) -> None:
    """Re-estimate every BatchNorm's running statistics as the plain average over ``images`` (uint8 NCHW).

    After the last optimiser step the running averages still mix statistics of earlier weights; recomputing them
    for the final weights is a cheap, standard fix for BNNs, whose pre-activation statistics move with every sign
    flip of a latent weight.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches below
    model.train()
    for i in range(0, len(images), batch_size):
        model(images[i : i + batch_size].float().div_(255))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    model.eval()


def recalibration_images(x_train: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """The recipe's BatchNorm re-estimation images (uint8 NCHW): a draw fixed by ``recipe.seed``, so every rerun of a
    finished run, and ``arbibench recalibrate`` on its checkpoint, re-estimates the same statistics."""
    gen = torch.Generator().manual_seed(recipe.seed)
    pick = torch.randperm(len(x_train), generator=gen)[: recipe.bn_recalibration_batches * recipe.batch_size]
    images = x_train[pick]
    return augment(images, gen) if recipe.bn_recalibration_augment else images


def recalibrate_checkpoint(
    name: str,
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    *,
    batches: int = KD_BN_BATCHES,
    log: Callable[[str], object] = print,
    eval_examples: int | None = None,
) -> dict[str, Any]:
    """Re-estimate the BatchNorm statistics of the zoo checkpoint ``name`` on augmented training images, as the kd
    recipe now does at the end of training, and write a finished run (weights + summary) to ``out_dir`` for
    ``export_checkpoint``; returns the summary, whose ``clean_acc_before_bn_recalibration`` is the shipped accuracy
    (both on the first ``eval_examples`` test images, default all 10,000).

    Only the running statistics change, so the card keeps the checkpoint's training history; its recipe records the
    re-estimation, which resets the statistics and so gives the same result whatever the checkpoint held before.
    """
    if batches < 1:
        raise ValueError(f"batches must be at least 1, got {batches}")
    card = load_card(name, CHECKPOINT_DIR)
    if not card.recipe:
        raise ValueError(f"the card of {name!r} records no training recipe: it was not trained by arbibench train")
    recipe = Recipe(**{**asdict(Recipe()), **card.recipe})
    if recipe.adversarial:
        raise ValueError(f"{name!r} was adversarially trained: its BatchNorm statistics are those of adversarial "
                         "batches, and clean ones would change its robustness; recalibrate standard models only")
    recipe = replace(recipe, bn_recalibration_batches=batches, bn_recalibration_augment=True)
    weights = init_checkpoint(name)  # sha256-verified
    model = build_model(recipe.arch, recipe.method)
    model.load_state_dict(load_file(str(weights)))
    x_train, _ = read_cifar10_arrays("train", data_dir)
    x_test, y_test = read_cifar10_arrays("test", data_dir)
    x_test, y_test = x_test[:eval_examples], y_test[:eval_examples]
    t0 = time.time()
    before = top1_accuracy(model, x_test, y_test)
    log(f"{name}: clean accuracy {before:.4f} with the shipped statistics")
    recalibrate_batchnorm(model, recalibration_images(torch.from_numpy(x_train), recipe))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_save_tensors(model.state_dict(), out / "model.safetensors")
    summary = {
        "recipe": asdict(recipe),
        "history": [dict(h) for h in card.history],
        "train_time_s": round((card.train_time_s or 0.0) + time.time() - t0, 1),
        "recalibrated_from_sha256": sha256_file(weights),
        "clean_acc_before_bn_recalibration": before,
        **final_accuracy(model, x_test, y_test),
    }
    if card.init_sha256 is not None:
        summary["init_sha256"] = card.init_sha256
    if card.robust_check is not None:
        summary["robust_check"] = dict(card.robust_check)
    atomic_write_json(summary, out / "summary.json")
    return summary
