"""Training recipes: everything that determines a trained checkpoint, recorded in its card.

Five families: ``finetune`` (cross-entropy from the FP twin's weights), ``kd`` (the few-epoch two-step distillation of
the BNN literature), ``at`` (fast adversarial training at Linf 8/255), ``long`` (the shipped kd checkpoint trained
on for an epoch budget, the epoch picked on held-out training images) and ``paper`` (each method's own paper's
CIFAR-10 recipe at its full length, for a GPU; :mod:`arbibench.train.paper_recipes` cites every choice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from arbibench.models.methods import Method, get_method
from arbibench.train import paper_recipes


@dataclass
class Recipe:
    """Everything that determines a trained checkpoint (recorded in its model card)."""

    arch: str = "resnet20"
    method: str = "fp"
    epochs: int = 20
    batch_size: int = 128
    optimizer: str = "sgd"  # "sgd" (momentum 0.9, Nesterov unless nesterov=False) or "adam"
    lr: float = 0.2
    weight_decay: float = 5e-4
    schedule: str = "onecycle"  # "onecycle" (linear warm-up then cosine), "cosine" or "linear" (decay to 0)
    warmup_fraction: float = 0.15
    seed: int = 0
    init_from: str | None = None  # a zoo name or a safetensors file whose matching tensors initialise the model
    train_examples: int | None = None  # first N training images only (quick runs and tests); None = all 50,000
    augmentation: list[str] = field(default_factory=lambda: ["random_crop_pad4", "horizontal_flip"])
    # Knowledge distillation: the teacher (zoo name or safetensors file of the FP twin, same arch) and the loss
    # weights; the loss is kd_weight * KL(teacher || student) + ce_weight * cross-entropy. None: cross-entropy only.
    teacher: str | None = None
    kd_weight: float = 1.0
    ce_weight: float = 0.0
    # Two-step training: the first step1_epochs of ``epochs`` keep real-valued weights (binary activations only);
    # each step has its own learning-rate schedule from ``lr``; step 2 puts no weight decay on latent binary weights.
    step1_epochs: int = 0
    clip_latent_weights: bool = False  # clamp latent binary weights to [-1, 1] after each step (clipped-STE kernels)
    bn_recalibration_batches: int = 0  # re-estimate BatchNorm statistics on this many training batches at the end
    bn_recalibration_augment: bool = False  # ... drawn with the training augmentation (random crop + flip)
    # Adversarial training: "fgsm_rs" trains on FGSM examples from a uniform random start in the Linf ball (Wong et
    # al., 2020, "Fast is better than free"), step adv_step; with a teacher, the student's loss on the adversarial
    # image is distilled from the teacher's logits on the clean one (Goldblum et al., 2020, ARD). None: clean images.
    adversarial: str | None = None
    adv_eps: float = 8 / 255
    adv_step: float = 10 / 255
    # Catastrophic-overfitting check: after each epoch, PGD-10 accuracy (eps adv_eps) on the last N test images (never
    # the ones the protocol evaluates first). A drop below half the best epoch's value stops the run and keeps the
    # best epoch's weights (Wong et al.'s early stopping). 0: no check.
    robust_check_images: int = 0
    # Held-out selection: the last val_examples training images are never trained on; every epoch is measured on
    # them, the best epoch's weights are the run's result, and the run stops after ``patience`` epochs without a
    # better validation accuracy (0: no early stop). The test set is measured once, on the selected weights.
    val_examples: int = 0
    patience: int = 0
    # The papers' recipes (``--recipe paper``): plain (not Nesterov) momentum; weight decay on convolution kernels only
    # ("conv", ReActNet) or on every parameter ("all"); another weight decay in step 2 of a two-step recipe (None:
    # the same); IR-Net's EDE starting temperature (None: the quantizer's default); and the source of each choice.
    nesterov: bool = True
    weight_decay_scope: str = "all"
    step2_weight_decay: float | None = None
    ede_t_min: float | None = None
    sources: dict[str, str] = field(default_factory=dict)


# Recipes that fit in ~45 minutes on a 2-core CPU; ``paper=True`` gives the long schedules for users with a GPU.
# Every BNN starts from the shipped FP twin (a zoo name, so the start is sha256-verified) and is fine-tuned with
# Adam and a cosine schedule, without weight decay on the latent binary weights. ``bnn`` was trained first, with a
# longer budget; irnet, bireal, reactnet and dorefa got 6 epochs, xnor and xnorpp 4, so that all fit in one working
# session on 2 shared CPU cores (the cards record each recipe; longer runs reach higher accuracy).
_BNN_EPOCHS = {"xnor": 4, "dorefa": 6, "bireal": 6, "irnet": 6, "reactnet": 6, "xnorpp": 4}
RECIPES: dict[str, Recipe] = {
    "fp": Recipe(method="fp", epochs=20, optimizer="sgd", lr=0.2, weight_decay=5e-4, schedule="onecycle"),
    "bnn": Recipe(method="bnn", epochs=15, optimizer="adam", lr=1e-3, weight_decay=0.0, schedule="cosine"),
    **{
        m: Recipe(method=m, epochs=e, optimizer="adam", lr=1e-3, weight_decay=0.0, schedule="cosine",
                  init_from="resnet20_fp")
        for m, e in _BNN_EPOCHS.items()
    },
}
# The few-epoch distillation recipe (``--recipe kd``): the FP twin as teacher and starting point, KD loss only as in
# ReActNet, KD_STEP1_EPOCHS of binary activations with real weights then binary weights; cosine from 1e-3 per step.
# BatchNorm statistics are re-estimated at the end on 100 batches of *augmented* training images, the statistics the
# weights were trained under, so they are a function of the final weights and the seed alone. On un-augmented
# images the step cost the first three kd models 3.3, 2.1 and 1.7 points; on augmented ones (``arbibench
# recalibrate``) they came back to within 0.3 points of training's running statistics (bireal 70.90% against
# 70.77%, irnet 69.30% against 69.50%, reactnet 75.23% against 75.49%, all 10,000 test images).
KD_EPOCHS, KD_STEP1_EPOCHS, KD_BN_BATCHES = 12, 3, 100
_CLIPPED_STE_METHODS = {"bnn", "xnor", "bireal", "reactnet", "xnorpp"}  # weight sign with the clipped estimator


def kd_recipe(method: str, arch: str = "resnet20") -> Recipe:
    """The few-epoch two-step distillation recipe for a BNN preset (the FP twin ``<arch>_fp`` is the teacher)."""
    if not get_method(method).is_binary:
        raise ValueError(f"the kd recipe trains a BNN from its FP twin; {method!r} is full precision")
    twin = f"{arch}_fp"
    return Recipe(
        arch=arch, method=method, epochs=KD_EPOCHS, optimizer="adam", lr=1e-3, weight_decay=0.0, schedule="cosine",
        init_from=twin, teacher=twin, kd_weight=1.0, ce_weight=0.0, step1_epochs=KD_STEP1_EPOCHS,
        clip_latent_weights=method in _CLIPPED_STE_METHODS, bn_recalibration_batches=KD_BN_BATCHES,
        bn_recalibration_augment=True,
    )


# Full-length schedules of the papers' CIFAR-10 experiments, for users with a GPU (``--paper``).
PAPER_EPOCHS = {"fp": 200, "bnn": 400, "xnor": 400, "dorefa": 400, "bireal": 400, "irnet": 400, "reactnet": 256,
                "xnorpp": 400}


# Fast adversarial training (``--recipe at``), Linf 8/255, from the standard model of the same method: the FP model
# with SGD and a one-cycle schedule (Wong et al. train 15 epochs from scratch; starting from the trained FP model
# needs fewer); a BNN with the two-step distillation recipe whose teacher and starting point are the adversarially
# trained FP twin.
AT_FP_EPOCHS, AT_BNN_EPOCHS, AT_BNN_STEP1_EPOCHS = 8, 5, 1
AT_CHECK_IMAGES = 500
AT_SUFFIX = "_at"  # zoo names of adversarially trained models: <arch>_<method>_at
ADVERSARIAL_KINDS = ("fgsm_rs",)


def at_recipe(method: str, arch: str = "resnet20") -> Recipe:
    """Fast adversarial training at Linf 8/255 for ``method``; a BNN distils from the adversarially trained FP twin."""
    common: dict[str, Any] = {"adversarial": "fgsm_rs", "adv_eps": 8 / 255, "adv_step": 10 / 255,
              "robust_check_images": AT_CHECK_IMAGES}
    if not get_method(method).is_binary:
        return Recipe(arch=arch, method=method, epochs=AT_FP_EPOCHS, optimizer="sgd", lr=0.1, weight_decay=5e-4,
                      schedule="onecycle", warmup_fraction=0.3, init_from=f"{arch}_{method}", **common)
    twin = f"{arch}_fp{AT_SUFFIX}"
    return replace(kd_recipe(method, arch), epochs=AT_BNN_EPOCHS, step1_epochs=AT_BNN_STEP1_EPOCHS, init_from=twin,
                   teacher=twin, **common)


# The long continuation (``--recipe long``): the shipped kd checkpoint trained on, binary weights throughout, with the
# same teacher, Adam and a cosine from half the kd learning rate over the whole budget; the last 5,000 training images
# are held out to pick the epoch and stop early after 8 epochs without improvement. The budget is the most epochs a
# model may have; the four strongest methods get 60, the three plain ones 30.
LONG_EPOCHS = {"reactnet": 60, "bireal": 60, "irnet": 60, "xnorpp": 60, "bnn": 30, "xnor": 30, "dorefa": 30}
LONG_LR, VAL_EXAMPLES, PATIENCE = 5e-4, 5_000, 8


def long_recipe(method: str, arch: str = "resnet20") -> Recipe:
    """Continue the shipped kd checkpoint of ``method`` for its epoch budget, selected on held-out training images."""
    base = kd_recipe(method, arch)
    return replace(base, epochs=LONG_EPOCHS.get(method, 30), step1_epochs=0, lr=LONG_LR, init_from=f"{arch}_{method}",
                   val_examples=VAL_EXAMPLES, patience=PATIENCE)


RECIPE_KINDS = ("finetune", "kd", "at", "long", "paper")
SCHEDULES = ("onecycle", "cosine", "linear")


def default_recipe(method: str, *, paper: bool = False, kind: str = "finetune", arch: str = "resnet20") -> Recipe:
    """The recipe of ``kind`` for ``method`` on ``arch``, whose FP twin (``<arch>_fp``) is its teacher or start
    wherever the recipe has one."""
    get_method(method)
    if kind not in RECIPE_KINDS:
        raise ValueError(f"unknown recipe {kind!r}; known: {', '.join(RECIPE_KINDS)}")
    if kind == "kd":
        r = kd_recipe(method, arch)
    elif kind == "long":
        r = long_recipe(method, arch)
    elif kind == "at":
        r = at_recipe(method, arch)
    elif kind == "paper":
        r = paper_recipe(method, arch)
    else:
        r = Recipe(**asdict(RECIPES[method])) if method in RECIPES else Recipe(method=method)
        r.arch = arch
        if r.init_from == "resnet20_fp":  # the CPU fine-tune recipes start from the backbone's FP twin
            r.init_from = f"{arch}_fp"
    if paper:
        r.epochs = PAPER_EPOCHS.get(method, 200)
        if r.step1_epochs:
            r.step1_epochs = r.epochs // 2  # ReActNet: two steps of equal length
    return r


def learning_rate(recipe: Recipe, step: int, total_steps: int) -> float:
    """The learning rate at ``step`` of a schedule of ``total_steps`` (one training step of the two-step recipe)."""
    t = step / max(total_steps, 1)
    if recipe.schedule == "linear":  # ReActNet's and Bi-Real Net's official code: straight down to 0
        return recipe.lr * (1 - t)
    if recipe.schedule == "onecycle":
        w = recipe.warmup_fraction
        if t < w:
            return recipe.lr * t / w
        t = (t - w) / (1 - w)
    return recipe.lr * 0.5 * (1 + math.cos(math.pi * t))


def stage_method(recipe: Recipe, epoch: int) -> Method:
    """The method trained at ``epoch``: step 1 of the two-step recipe keeps the kernels real-valued."""
    method = get_method(recipe.method)
    if epoch < recipe.step1_epochs:
        return replace(method, kernel_quantizer=None)
    return method


OPTIMIZERS = ("sgd", "adam")


def check_recipe(recipe: Recipe, option: Callable[[str], str] = str) -> None:
    """Refuse a recipe that cannot train, before a run folder exists for it: an unknown backbone once failed only
    after its folder was made, ``--lr -1`` with torch's words, and ``--epochs 0`` once measured a random
    initialisation and exited 0. ``option`` spells a field as the caller's user wrote it (the CLI: ``--lr``)."""
    from arbibench.data.cifar10 import SPLIT_SIZES  # start-up: the data and model packages load torch
    from arbibench.models.architectures import ARCHITECTURES

    if recipe.arch not in ARCHITECTURES:
        raise ValueError(f"{option('arch')} {recipe.arch!r} is not a known architecture; known: "
                         f"{', '.join(sorted(ARCHITECTURES))}")
    get_method(recipe.method)
    for name in ("epochs", "batch_size"):
        if getattr(recipe, name) < 1:
            raise ValueError(f"{option(name)} must be at least 1, got {getattr(recipe, name)}")
    for name in ("val_examples", "patience", "robust_check_images", "bn_recalibration_batches"):
        if getattr(recipe, name) < 0:
            raise ValueError(f"{option(name)} must be 0 (off) or positive, got {getattr(recipe, name)}")
    if recipe.train_examples is not None and recipe.train_examples < 1:
        raise ValueError(
            f"{option('train_examples')} must be at least 1 (or None for all), got {recipe.train_examples}"
        )
    if recipe.val_examples >= SPLIT_SIZES["train"]:  # held out of all 50,000 before train_examples takes its first
        raise ValueError(f"{option('val_examples')} {recipe.val_examples} leaves no training images out of "
                         f"{SPLIT_SIZES['train']}")
    if recipe.step1_epochs and not 0 < recipe.step1_epochs < recipe.epochs:
        raise ValueError(
            f"{option('step1_epochs')} must be 0 (binary weights from the first epoch) or between 1 and epochs - 1 = "
            f"{recipe.epochs - 1}, got {recipe.step1_epochs}"
        )
    if not (math.isfinite(recipe.lr) and recipe.lr > 0):
        raise ValueError(f"{option('lr')} (the peak learning rate) must be a positive number, got {recipe.lr:g}")
    for name in ("weight_decay", "step2_weight_decay", "kd_weight", "ce_weight"):
        value = getattr(recipe, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{option(name)} must be 0 or a positive number, got {value:g}")
    if not 0 <= recipe.warmup_fraction < 1:
        raise ValueError(f"{option('warmup_fraction')} must be in [0, 1), got {recipe.warmup_fraction:g}")
    if recipe.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {recipe.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if recipe.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {recipe.schedule!r}; known: {', '.join(SCHEDULES)}")
    if recipe.weight_decay_scope not in ("all", "conv"):
        raise ValueError(f"weight_decay_scope must be 'all' or 'conv', got {recipe.weight_decay_scope!r}")
    if recipe.adversarial is not None:
        if recipe.adversarial not in ADVERSARIAL_KINDS:
            raise ValueError(f"unknown adversarial training {recipe.adversarial!r}; known: "
                             f"{', '.join(ADVERSARIAL_KINDS)}")
        if not (recipe.adv_eps > 0 and recipe.adv_step > 0):
            raise ValueError(f"adv_eps and adv_step must be positive, got {recipe.adv_eps:g} and {recipe.adv_step:g}")


def paper_recipe(method: str, arch: str = "resnet20") -> Recipe:
    """``method``'s own paper's CIFAR-10 recipe at its full length (see :mod:`arbibench.train.paper_recipes`), with
    the last 5,000 training images held out to pick the epoch; every choice's source is in ``recipe.sources``."""
    entry = paper_recipes.PAPER_RECIPES.get(method)
    if entry is None:
        known = ", ".join(sorted(paper_recipes.PAPER_RECIPES))
        raise ValueError(f"no paper recipe for {method!r}; the papers' recipes exist for {known}")
    fields = {k: v for k, v in entry.settings.items() if k not in ("init_from", "teacher", "clip_latent_weights")}
    twin = f"{arch}_fp"
    return Recipe(
        arch=arch, method=method, **fields,
        init_from=twin if entry.settings.get("init_from") == "fp_twin" else None,
        teacher=twin if entry.settings.get("teacher") == "fp_twin" else None,
        clip_latent_weights=method in _CLIPPED_STE_METHODS and entry.settings.get("clip_latent_weights", True),
        val_examples=VAL_EXAMPLES, patience=0, sources=dict(entry.sources),
    )
