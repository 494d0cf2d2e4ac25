"""The papers' CIFAR-10 recipes, one entry a method, each choice with its source.

Facts only (no code of the papers): what each method's paper or official code does on CIFAR-10 ResNet-20, read for
``docs/paper-recipes.md``. Where a paper has no CIFAR-10 recipe (most BNN papers report ImageNet only), the entry
takes the unified CIFAR-10 protocol of BiBench (Qin et al., ICML 2023; configs ``acc_cifar10`` of htqin/BiBench),
which re-runs these methods on ResNet-20 from a trained FP ResNet-20, and says so. Two deliberate departures, the
same for every method: batch 128 everywhere (the ImageNet recipes' 256-512 are for 1.28M images), and the last 5,000
training images held out to pick the epoch (the papers report their best test epoch; arbibench never looks at the
test set before export). ``init_from``/``teacher`` ``"fp_twin"`` stand for the zoo's FP model of the same backbone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HE = "He et al., CVPR 2016, sec. 4.2"
BIBENCH = "BiBench (Qin et al., ICML 2023), htqin/BiBench configs/acc_cifar10 (the paper has no CIFAR-10 recipe)"
IRNET_CODE = "htqin/IR-Net CIFAR-10/ResNet20/1w1a/trainer.py"
REACTNET_CODE = "liuzechun/ReActNet resnet/{1_step1,2_step2}/run.sh and train.py (ImageNet; same settings here)"
BIREAL_CODE = "liuzechun/Bi-Real-net README, PyTorch from-scratch recipe (ImageNet; same settings here)"
ARBIBENCH = "arbibench (not in the paper)"


@dataclass(frozen=True)
class PaperRecipe:
    """A method's recipe settings (Recipe field values) and where each comes from."""

    settings: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)


def _bibench(clipped: bool = True) -> PaperRecipe:
    """BiBench's CIFAR-10 ResNet-20 protocol for a BNN whose paper has none: from the FP twin, Adam, cosine, 400."""
    return PaperRecipe(
        {"epochs": 400, "batch_size": 128, "optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0,
         "schedule": "cosine", "init_from": "fp_twin", "clip_latent_weights": clipped},
        {"optimizer, lr, schedule, weight decay, epochs, start": BIBENCH, "batch size": BIBENCH,
         "held-out selection": ARBIBENCH},
    )


PAPER_RECIPES: dict[str, PaperRecipe] = {
    "fp": PaperRecipe(
        {"epochs": 200, "batch_size": 128, "optimizer": "sgd", "nesterov": False, "lr": 0.1, "weight_decay": 1e-4,
         "schedule": "cosine"},
        {"optimizer, lr, weight decay, batch size, from scratch": HE,
         "200 epochs, cosine (He et al.: steps at 32k/48k of 64k iterations)": "BiBench's FP ResNet-20 config",
         "held-out selection": f"{HE} (a 45k/5k split picked the stopping point)"},
    ),
    "irnet": PaperRecipe(
        {"epochs": 400, "batch_size": 128, "optimizer": "sgd", "nesterov": False, "lr": 0.1, "weight_decay": 1e-4,
         "schedule": "cosine", "ede_t_min": 1e-3, "clip_latent_weights": False},
        {"SGD momentum 0.9, lr 0.1, cosine, 400 epochs, batch 128": IRNET_CODE,
         "weight decay 1e-4 on every parameter": IRNET_CODE, "from scratch": IRNET_CODE,
         "EDE from t = 1e-3 to 10 (ResNet-20 W1/A1)": IRNET_CODE, "held-out selection": ARBIBENCH},
    ),
    "reactnet": PaperRecipe(
        {"epochs": 256, "step1_epochs": 128, "batch_size": 128, "optimizer": "adam", "lr": 5e-4,
         "schedule": "linear", "weight_decay": 1e-5, "weight_decay_scope": "conv", "step2_weight_decay": 0.0,
         "teacher": "fp_twin", "kd_weight": 1.0, "ce_weight": 0.0},
        {"two steps (binary activations, then binary weights), Adam, linear decay to 0": REACTNET_CODE,
         "lr 5e-4 over 2 x 128 epochs (the official 256-epoch rate)": REACTNET_CODE,
         "weight decay 1e-5 on convolution kernels in step 1, 0 in step 2": REACTNET_CODE,
         "distributional loss only, from a frozen FP teacher": REACTNET_CODE,
         "teacher: the FP ResNet-20 twin (the paper: ResNet-34 on ImageNet)": ARBIBENCH,
         "student from scratch": REACTNET_CODE, "held-out selection": ARBIBENCH},
    ),
    "bireal": PaperRecipe(
        {"epochs": 256, "batch_size": 128, "optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0,
         "schedule": "linear"},
        {"Adam, lr 1e-3 linearly to 0 over 256 epochs, no weight decay, from scratch": BIREAL_CODE,
         "held-out selection": ARBIBENCH},
    ),
    "bnn": _bibench(),
    "xnor": _bibench(),
    "dorefa": _bibench(clipped=False),
    "xnorpp": _bibench(),
}


def paper_epochs() -> dict[str, int]:
    """The epochs of each method's CIFAR-10 paper recipe (``irnet``: 400), what the learning curves set a zoo model's
    training line against."""
    return {method: int(recipe.settings["epochs"]) for method, recipe in PAPER_RECIPES.items()}
