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
"""

from arbibench.train.accuracy import evaluate, final_accuracy
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
    default_recipe,
    kd_recipe,
    learning_rate,
    long_recipe,
    stage_method,
)
from arbibench.train.selection import split_validation

__all__ = [
    "ADVERSARIAL_KINDS", "AT_SUFFIX", "KD_BN_BATCHES", "KD_EPOCHS", "KD_STEP1_EPOCHS", "LONG_EPOCHS", "PAPER_EPOCHS",
    "RECIPES", "RECIPE_KINDS", "Recipe", "at_recipe", "augment", "catastrophic_overfitting_check", "default_recipe",
    "distillation_loss", "evaluate", "fgsm_random_start", "final_accuracy", "init_learned_scales", "kd_recipe",
    "learning_rate", "long_recipe", "recalibrate_batchnorm", "recalibrate_checkpoint", "recalibration_images",
    "robust_check", "split_validation", "stage_method", "train",
]
