"""Training the zoo: short, deterministic, resumable runs on the real CIFAR-10 train set, one module a job.

- :mod:`~arbibench.train.recipes`: what determines a checkpoint (finetune, kd, at, long) and the learning rate;
- :mod:`~arbibench.train.loop`: the resumable run, checkpointed every epoch;
- :mod:`~arbibench.train.selection`: the held-out validation split that picks epochs, never the test set;
- :mod:`~arbibench.train.batchnorm`: BatchNorm statistics re-estimated for the final weights;
- :mod:`~arbibench.train.adversarial`: fast adversarial training and its catastrophic-overfitting check;
- :mod:`~arbibench.train.checkpoints`: atomic safetensors checkpoints and the verified starting point;
- :mod:`~arbibench.train.augmentation`, :mod:`~arbibench.train.accuracy`: the augmentation and clean accuracy.

The kd recipe is the few-epoch BNN recipe of the literature: start from the FP twin, train binary activations with
real weights first (step 1), then binary weights too (step 2, ReActNet's and AdamBNN's two-step scheme), with the FP
twin as teacher through ReActNet's distributional loss, Adam, no weight decay on the latent binary weights in step 2,
latent weights clipped to [-1, 1] where the weight sign uses the clipped estimator, and BatchNorm statistics
re-estimated at the end.

The names load on first use (PEP 562 ``__getattr__``), so that ``arbibench train --help`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports

if TYPE_CHECKING:
    from arbibench.train.accuracy import final_accuracy, top1_accuracy
    from arbibench.train.adversarial import catastrophic_overfitting_check, fgsm_random_start, robust_check
    from arbibench.train.augmentation import augment
    from arbibench.train.batchnorm import recalibrate_batchnorm, recalibrate_checkpoint, recalibration_images
    from arbibench.train.loop import distillation_loss, init_learned_scales, train
    from arbibench.train.recipes import (
        ADVERSARIAL_KINDS,
        AT_SUFFIX,
        KD_BN_BATCHES,
        KD_EPOCHS,
        KD_STEP1_EPOCHS,
        LONG_EPOCHS,
        PAPER_EPOCHS,
        RECIPE_KINDS,
        RECIPES,
        Recipe,
        at_recipe,
        check_recipe,
        default_recipe,
        kd_recipe,
        learning_rate,
        long_recipe,
        stage_method,
    )
    from arbibench.train.selection import split_validation

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "top1_accuracy": "arbibench.train.accuracy",
    "final_accuracy": "arbibench.train.accuracy",
    "catastrophic_overfitting_check": "arbibench.train.adversarial",
    "fgsm_random_start": "arbibench.train.adversarial",
    "robust_check": "arbibench.train.adversarial",
    "augment": "arbibench.train.augmentation",
    "recalibrate_batchnorm": "arbibench.train.batchnorm",
    "recalibrate_checkpoint": "arbibench.train.batchnorm",
    "recalibration_images": "arbibench.train.batchnorm",
    "distillation_loss": "arbibench.train.loop",
    "init_learned_scales": "arbibench.train.loop",
    "train": "arbibench.train.loop",
    "ADVERSARIAL_KINDS": "arbibench.train.recipes",
    "AT_SUFFIX": "arbibench.train.recipes",
    "KD_BN_BATCHES": "arbibench.train.recipes",
    "KD_EPOCHS": "arbibench.train.recipes",
    "KD_STEP1_EPOCHS": "arbibench.train.recipes",
    "LONG_EPOCHS": "arbibench.train.recipes",
    "PAPER_EPOCHS": "arbibench.train.recipes",
    "RECIPE_KINDS": "arbibench.train.recipes",
    "RECIPES": "arbibench.train.recipes",
    "Recipe": "arbibench.train.recipes",
    "at_recipe": "arbibench.train.recipes",
    "check_recipe": "arbibench.train.recipes",
    "default_recipe": "arbibench.train.recipes",
    "kd_recipe": "arbibench.train.recipes",
    "learning_rate": "arbibench.train.recipes",
    "long_recipe": "arbibench.train.recipes",
    "stage_method": "arbibench.train.recipes",
    "split_validation": "arbibench.train.selection",
}

__all__ = [
    "ADVERSARIAL_KINDS",
    "AT_SUFFIX",
    "KD_BN_BATCHES",
    "KD_EPOCHS",
    "KD_STEP1_EPOCHS",
    "LONG_EPOCHS",
    "PAPER_EPOCHS",
    "RECIPES",
    "RECIPE_KINDS",
    "Recipe",
    "at_recipe",
    "augment",
    "catastrophic_overfitting_check",
    "check_recipe",
    "default_recipe",
    "distillation_loss",
    "top1_accuracy",
    "fgsm_random_start",
    "final_accuracy",
    "init_learned_scales",
    "kd_recipe",
    "learning_rate",
    "long_recipe",
    "recalibrate_batchnorm",
    "recalibrate_checkpoint",
    "recalibration_images",
    "robust_check",
    "split_validation",
    "stage_method",
    "train",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
