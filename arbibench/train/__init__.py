"""Training recipes for the zoo: short, deterministic, resumable runs on the real CIFAR-10 train set.

Two recipe families: ``finetune`` (cross-entropy from the FP twin's weights) and ``kd``, the few-epoch BNN recipe
of the literature: start from the FP twin, train binary activations with real weights first (step 1), then binary
weights too (step 2, ReActNet's and AdamBNN's two-step scheme), with the FP twin as teacher through ReActNet's
distributional loss, Adam, no weight decay on the latent binary weights in step 2, latent weights clipped to
[-1, 1] where the weight sign uses the clipped estimator, and BatchNorm statistics re-estimated at the end.

Every epoch ends with an atomic checkpoint (safetensors for tensors, JSON for the rest; no pickle), so a killed run
restarts from its last finished epoch and produces the same weights as an uninterrupted one: the shuffling and
augmentation of epoch ``e`` are drawn from a generator seeded by ``(seed, e)``, and the learning rate is a pure
function of the step.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from safetensors.torch import load_file, save_file
from torch import nn

from arbibench.attacks.pgd import PGD
from arbibench.attacks.threat import Linf
from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.faults import fault_point
from arbibench.models.architectures import build_model
from arbibench.models.methods import Method, get_method
from arbibench.models.zoo import CHECKPOINT_DIR, ZOO, ChecksumError, load_card, sha256_file, verified_checkpoint
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from arbibench.nn.quantizers import set_training_progress
from arbibench.nn.scalings import LearnedScaleSign


@dataclass
class Recipe:
    """Everything that determines a trained checkpoint (recorded in its model card)."""

    arch: str = "resnet20"
    method: str = "fp"
    epochs: int = 20
    batch_size: int = 128
    optimizer: str = "sgd"  # "sgd" (Nesterov momentum 0.9) or "adam"
    lr: float = 0.2
    weight_decay: float = 5e-4
    schedule: str = "onecycle"  # "onecycle" (linear warm-up then cosine) or "cosine"
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
    common = {"adversarial": "fgsm_rs", "adv_eps": 8 / 255, "adv_step": 10 / 255,
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


RECIPE_KINDS = ("finetune", "kd", "at", "long")


def default_recipe(method: str, *, paper: bool = False, kind: str = "finetune") -> Recipe:
    """The shipped recipe of ``kind`` for ``method``: ``finetune`` (cross-entropy) or ``kd`` (two-step distillation)."""
    get_method(method)
    if kind not in RECIPE_KINDS:
        raise ValueError(f"unknown recipe {kind!r}; known: {', '.join(RECIPE_KINDS)}")
    if kind == "kd":
        r = kd_recipe(method)
    elif kind == "long":
        r = long_recipe(method)
    elif kind == "at":
        r = at_recipe(method)
    else:
        r = Recipe(**asdict(RECIPES[method])) if method in RECIPES else Recipe(method=method)
    if paper:
        r.epochs = PAPER_EPOCHS.get(method, 200)
        if r.step1_epochs:
            r.step1_epochs = r.epochs // 2  # ReActNet: two steps of equal length
    return r


def learning_rate(recipe: Recipe, step: int, total_steps: int) -> float:
    """The learning rate at ``step`` of a schedule of ``total_steps`` (one training step of the two-step recipe)."""
    t = step / max(total_steps, 1)
    if recipe.schedule == "onecycle":
        w = recipe.warmup_fraction
        if t < w:
            return recipe.lr * t / w
        t = (t - w) / (1 - w)
    return recipe.lr * 0.5 * (1 + math.cos(math.pi * t))


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 32x32 crop of the 4-pixel zero-padded image and random horizontal flip (uint8 in, uint8 out)."""
    n = x.shape[0]
    padded = F.pad(x, (4, 4, 4, 4))
    oy = torch.randint(0, 9, (n,), generator=gen)
    ox = torch.randint(0, 9, (n,), generator=gen)
    ar = torch.arange(32)
    rows = (oy[:, None] + ar)[:, None, :, None]
    cols = (ox[:, None] + ar)[:, None, None, :]
    out = padded[torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None], rows, cols]
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


def _atomic_save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    fault_point("checkpoint.write")  # crash tests kill here (arbibench.faults)
    os.replace(tmp, path)


def _atomic_write_json(obj: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items() if torch.is_tensor(v)}
    return tensors, {"param_groups": sd["param_groups"]}


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        i, k = key.split(".", 1)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 500) -> float:
    """Clean accuracy of ``model`` on uint8 NCHW images."""
    model.eval()
    correct = 0
    for i in range(0, len(y), batch_size):
        xb = torch.from_numpy(x[i : i + batch_size]).float().div_(255)
        correct += (model(xb).argmax(1) == torch.from_numpy(y[i : i + batch_size])).sum().item()
    return correct / len(y)


def final_accuracy(model: torch.nn.Module, x_test: np.ndarray, y_test: np.ndarray) -> dict:
    """The summary's accuracy fields, which ``export_checkpoint`` copies into the model card."""
    return {
        "clean_acc": evaluate(model, x_test, y_test),
        "clean_acc_n_examples": len(y_test),
        "clean_acc_first500": evaluate(model, x_test[:500], y_test[:500]),
        "torch_threads": torch.get_num_threads(),
    }


def _init_checkpoint(spec: str) -> Path:
    """A zoo model name resolves to its sha256-verified shipped checkpoint; anything else is a file path.

    A model exported into the zoo folder but not yet registered (the queue of ``make zoo`` trains the adversarially
    trained BNNs from ``resnet20_fp_at`` right after exporting it) is verified against its card's sha256; so is a
    zoo model re-exported by the queue and not yet re-pinned, when its card names the pinned version as the one it
    replaced (the queue continues ``resnet20_reactnet`` right after re-estimating its statistics).
    """
    exported, card = CHECKPOINT_DIR / f"{spec}.safetensors", CHECKPOINT_DIR / f"{spec}.json"
    if spec in ZOO:
        try:
            return verified_checkpoint(ZOO[spec])
        except ChecksumError:
            replaced = json.loads(card.read_text()).get("previous_versions", []) if card.is_file() else []
            if ZOO[spec].sha256 not in {v.get("sha256") for v in replaced}:
                raise
    if exported.is_file() and card.is_file():
        expected = json.loads(card.read_text()).get("sha256")
        if sha256_file(exported) != expected:
            raise ChecksumError(f"{exported} does not match the sha256 in {card}; export it again")
        return exported
    if not Path(spec).is_file():
        raise FileNotFoundError(f"{spec!r} is neither a zoo model name nor an existing checkpoint file")
    return Path(spec)


def stage_method(recipe: Recipe, epoch: int) -> Method:
    """The method trained at ``epoch``: step 1 of the two-step recipe keeps the kernels real-valued."""
    method = get_method(recipe.method)
    if epoch < recipe.step1_epochs:
        return replace(method, kernel_quantizer=None)
    return method


def _load_matching(model: nn.Module, tensors: dict[str, torch.Tensor]) -> int:
    own = model.state_dict()
    matched = {k: v for k, v in tensors.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(matched, strict=False)
    return len(matched)


def _init_learned_scales(model: nn.Module) -> None:
    """Start every learned weight scale (XNOR-Net++) at mean|W| per output channel, the analytic scale."""
    for m in model.modules():
        if isinstance(m, (BinaryConv2d, BinaryLinear)) and isinstance(m.kernel_quantizer, LearnedScaleSign):
            dims = tuple(range(1, m.weight.dim()))
            with torch.no_grad():
                m.kernel_quantizer.alpha.copy_(m.weight.abs().mean(dim=dims).view_as(m.kernel_quantizer.alpha))


def _latent_binary_weights(model: nn.Module) -> list[nn.Parameter]:
    return [
        m.weight
        for m in model.modules()
        if isinstance(m, (BinaryConv2d, BinaryLinear)) and m.kernel_quantizer is not None
    ]


def _make_optimizer(recipe: Recipe, model: nn.Module, epoch: int) -> torch.optim.Optimizer:
    latent = {id(p) for p in _latent_binary_weights(model)} if epoch >= recipe.step1_epochs > 0 else set()
    decay = [p for p in model.parameters() if id(p) not in latent]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}]
    if latent:  # step 2: no weight decay on latent binary weights (it would pull their signs towards flipping)
        groups.append({"params": [p for p in model.parameters() if id(p) in latent], "weight_decay": 0.0})
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=recipe.lr, momentum=0.9, nesterov=True)
    if recipe.optimizer == "adam":
        return torch.optim.Adam(groups, lr=recipe.lr, foreach=True)
    raise ValueError(f"unknown optimizer {recipe.optimizer!r}; use 'sgd' or 'adam'")


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """ReActNet's distributional loss: cross-entropy of the student's softmax to the teacher's, batch mean."""
    return -(F.softmax(teacher_logits, dim=1) * F.log_softmax(student_logits, dim=1)).sum(dim=1).mean()


def fgsm_random_start(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, step: float, gen: torch.Generator
) -> torch.Tensor:
    """Wong et al.'s training example: one signed-gradient step of size ``step`` from a uniform start in the Linf
    ball, projected back onto the ball and [0, 1]. The model stays in its current (training) mode, as in the paper.
    """
    delta = (torch.rand(x.shape, generator=gen) * 2 - 1).mul_(eps)
    delta = ((x + delta).clamp_(0, 1) - x).requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(x + delta), y), delta)
    delta = (delta.detach() + step * grad.sign()).clamp_(-eps, eps)
    return (x + delta).clamp_(0, 1)


def robust_check(model: nn.Module, x: np.ndarray, y: np.ndarray, eps: float, seed: int = 0) -> float:
    """PGD-10 accuracy at Linf ``eps`` of the deployed (eval-mode) model: the catastrophic-overfitting check."""
    model.eval()
    xb, yb = torch.from_numpy(x).float().div_(255), torch.from_numpy(y).long()
    x_adv = PGD(steps=10)(model, xb, yb, Linf(eps), torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return (model(x_adv).argmax(1) == yb).float().mean().item()


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


def catastrophic_overfitting_check(recipe: Recipe, history: list[dict], n_images: int) -> dict:
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


def train(
    recipe: Recipe,
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    log: Callable[[str], object] = print,
    *,
    eval_examples: int | None = None,
) -> dict:
    """Train (or resume) ``recipe`` into ``out_dir``; returns the final summary (also in ``out_dir/summary.json``).

    The summary's ``clean_acc`` is measured on the first ``eval_examples`` test images (default: all 10,000).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state_json = out / "state.json"
    _check_counts(recipe)
    if recipe.adversarial is not None and recipe.adversarial not in ADVERSARIAL_KINDS:
        raise ValueError(f"unknown adversarial training {recipe.adversarial!r}; known: {', '.join(ADVERSARIAL_KINDS)}")
    if recipe.step1_epochs and not 0 < recipe.step1_epochs < recipe.epochs:
        raise ValueError(
            f"step1_epochs must be 0 (binary weights from the first epoch) or between 1 and epochs - 1 = "
            f"{recipe.epochs - 1}, got {recipe.step1_epochs}"
        )
    torch.manual_seed(recipe.seed)
    meta = json.loads(state_json.read_text()) if state_json.exists() else None
    if meta is not None:  # a run saved before a recipe field existed ran with that field's default
        meta["recipe"] = {**asdict(Recipe()), **meta["recipe"]}
    if meta is not None and meta["recipe"] != asdict(recipe):
        raise ValueError(
            f"{out} holds a run with a different recipe ({meta['recipe']}); use another --out or delete it."
        )
    # The model of the epoch the run stands at: the last finished one when resuming, else the first.
    model = build_model(recipe.arch, stage_method(recipe, meta["epoch"] if meta else 0))
    teacher = None
    if recipe.teacher:
        teacher = build_model(recipe.arch, "fp")
        teacher.load_state_dict(load_file(str(_init_checkpoint(recipe.teacher))))
        teacher.eval().requires_grad_(False)
    # The sha256 of the starting weights goes into the card: a zoo name alone stops naming them once a run that
    # continues a zoo model (``--init-from resnet20_bireal``) is exported over it.
    init_sha256 = meta.get("init_sha256") if meta is not None else None
    if recipe.init_from and meta is None:
        init_path = _init_checkpoint(recipe.init_from)
        init_sha256 = sha256_file(init_path)
        n = _load_matching(model, load_file(str(init_path)))
        log(f"initialised {n}/{len(model.state_dict())} tensors from {recipe.init_from}")
    opt = _make_optimizer(recipe, model, meta["epoch"] if meta else 0)

    start_epoch, history, elapsed = 0, [], 0.0
    if meta is not None:
        model.load_state_dict(load_file(str(out / "model.safetensors")))
        _load_optimizer(opt, load_file(str(out / "optimizer.safetensors")), meta["optimizer"])
        start_epoch, history, elapsed = meta["epoch"] + 1, meta["history"], meta["elapsed_s"]
        if meta.get("stopped_early"):
            start_epoch = recipe.epochs
        log(f"resuming {out} at epoch {start_epoch + 1}/{recipe.epochs}")

    x_train, y_train = read_cifar10_arrays("train", data_dir)
    x_train, y_train, x_val, y_val = split_validation(x_train, y_train, recipe.val_examples)
    x_test, y_test = read_cifar10_arrays("test", data_dir)
    n_check = recipe.robust_check_images
    x_check, y_check = x_test[len(y_test) - n_check :], y_test[len(y_test) - n_check :]
    x_test, y_test = x_test[:eval_examples], y_test[:eval_examples]
    finished = _finished_summary(out, recipe, start_epoch, len(y_test))
    if finished is not None:
        # Running a finished run again (``make zoo`` after a continuation the zoo kept its model over) must not
        # re-estimate statistics already re-estimated, nor measure "before re-estimation" on the re-estimated weights.
        log(f"{out} is finished: clean accuracy {finished['clean_acc']:.4f} (from its summary.json)")
        return finished
    if recipe.train_examples is not None:
        x_train, y_train = x_train[: recipe.train_examples], y_train[: recipe.train_examples]
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    steps_per_epoch = math.ceil(len(yt) / recipe.batch_size)
    validation = meta.get("validation") if meta is not None else None
    if recipe.val_examples and validation is None:
        # the starting point's own validation accuracy: a continuation must beat it to replace the model it continues
        validation = {"init_val_acc": evaluate(model, x_val, y_val) if recipe.init_from else None}

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as progress:
        for epoch in range(start_epoch, recipe.epochs):
            t0 = time.time()
            if recipe.step1_epochs and epoch == recipe.step1_epochs:  # step 2: binarize the kernels
                step1_state = model.state_dict()
                model = build_model(recipe.arch, stage_method(recipe, epoch))
                _load_matching(model, step1_state)
                _init_learned_scales(model)
                opt = _make_optimizer(recipe, model, epoch)
                log(f"step 2 from epoch {epoch + 1}: binary weights")
            two_step = recipe.step1_epochs > 0
            stage_start = recipe.step1_epochs if two_step and epoch >= recipe.step1_epochs else 0
            stage_end = recipe.step1_epochs if two_step and epoch < recipe.step1_epochs else recipe.epochs
            stage_total = (stage_end - stage_start) * steps_per_epoch
            clipped = _latent_binary_weights(model) if recipe.clip_latent_weights else []
            gen = torch.Generator().manual_seed(recipe.seed * 100_003 + epoch)
            perm = torch.randperm(len(yt), generator=gen)
            model.train()
            set_training_progress(model, epoch / recipe.epochs)  # IR-Net's EDE schedule, a function of the epoch
            task = progress.add_task(f"epoch {epoch + 1}/{recipe.epochs}", total=steps_per_epoch, info="")
            loss_sum, correct, seen = 0.0, 0, 0
            for s in range(steps_per_epoch):
                idx = perm[s * recipe.batch_size : (s + 1) * recipe.batch_size]
                xb = augment(xt[idx], gen).float().div_(255)
                yb = yt[idx]
                for g in opt.param_groups:
                    g["lr"] = learning_rate(recipe, (epoch - stage_start) * steps_per_epoch + s, stage_total)
                x_in = xb
                if recipe.adversarial is not None:
                    x_in = fgsm_random_start(model, xb, yb, recipe.adv_eps, recipe.adv_step, gen)
                logits = model(x_in)
                if teacher is None:
                    loss = F.cross_entropy(logits, yb)
                else:
                    with torch.no_grad():
                        teacher_logits = teacher(xb)
                    loss = recipe.kd_weight * distillation_loss(logits, teacher_logits)
                    if recipe.ce_weight:
                        loss = loss + recipe.ce_weight * F.cross_entropy(logits, yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if clipped:
                    with torch.no_grad():
                        torch._foreach_clamp_min_(clipped, -1.0)
                        torch._foreach_clamp_max_(clipped, 1.0)
                loss_sum += loss.item() * len(yb)
                correct += (logits.argmax(1) == yb).sum().item()
                seen += len(yb)
                progress.update(task, advance=1, info=f"loss {loss_sum / seen:.3f} acc {correct / seen:.3f}")
            history.append({"epoch": epoch + 1, "train_loss": loss_sum / seen, "train_acc": correct / seen})
            stopped_early = False
            if recipe.val_examples:  # selection on held-out training images; the test set is not looked at
                look = "val"
                history[-1]["val_acc"] = acc = evaluate(model, x_val, y_val)
                best_epoch = _best_val_epoch(history)
                if best_epoch == epoch + 1:
                    _atomic_save_tensors(model.state_dict(), out / "best_val.safetensors")
                elif recipe.patience and epoch + 1 - best_epoch >= recipe.patience:
                    stopped_early = True
                    log(f"epoch {epoch + 1}: no better validation accuracy for {recipe.patience} epochs; stopping")
            else:
                look = "test@1000"
                history[-1]["test_acc_1000"] = acc = evaluate(model, x_test[:1000], y_test[:1000])  # a quick look
            if n_check:
                pgd_acc = robust_check(model, x_check, y_check, recipe.adv_eps)
                best = max((h["pgd10_acc"] for h in history[:-1]), default=0.0)
                history[-1]["pgd10_acc"] = pgd_acc
                if pgd_acc >= best:
                    _atomic_save_tensors(model.state_dict(), out / "best.safetensors")
                elif pgd_acc < 0.5 * best:  # catastrophic overfitting: keep the best epoch and stop
                    model.load_state_dict(load_file(str(out / "best.safetensors")))
                    history[-1]["catastrophic_overfitting"] = True
                    stopped_early = True
                    log(f"epoch {epoch + 1}: PGD-10 accuracy fell from {best:.3f} to {pgd_acc:.3f}: catastrophic "
                        "overfitting; stopping with the best epoch's weights")
            elapsed += time.time() - t0
            progress.update(task, info=f"loss {loss_sum / seen:.3f} acc {correct / seen:.3f} {look} {acc:.3f}")
            opt_tensors, opt_meta = _optimizer_tensors(opt)
            _atomic_save_tensors(model.state_dict(), out / "model.safetensors")
            _atomic_save_tensors(opt_tensors, out / "optimizer.safetensors")
            _atomic_write_json(
                {
                    "recipe": asdict(recipe),
                    "epoch": epoch,
                    "history": history,
                    "elapsed_s": elapsed,
                    "optimizer": opt_meta,
                    "stopped_early": stopped_early,
                    "init_sha256": init_sha256,
                    "validation": validation,
                },
                state_json,
            )
            log(f"epoch {epoch + 1}: {history[-1]}")
            if stopped_early:
                break

    set_training_progress(model, 1.0)  # the deployed state, the one a freshly built model starts in
    summary = {
        "recipe": asdict(recipe),
        "history": history,
        "train_time_s": round(elapsed, 1),
    }
    if init_sha256 is not None:
        summary["init_sha256"] = init_sha256
    if n_check:
        summary["robust_check"] = catastrophic_overfitting_check(recipe, history, len(y_check))
    if recipe.val_examples:
        best_epoch = _best_val_epoch(history)
        model.load_state_dict(load_file(str(out / "best_val.safetensors")))
        summary["validation"] = {
            **(validation or {}),
            "examples": recipe.val_examples,
            "split": f"the last {recipe.val_examples} CIFAR-10 training images (never trained on by this run)",
            "selection": "the epoch with the best validation accuracy"
            + (f"; stop after {recipe.patience} epochs without a better one" if recipe.patience else ""),
            "best_epoch": best_epoch,
            "epochs_run": len(history),
            "stopped_early": len(history) < recipe.epochs,
            "val_acc_best_epoch": history[best_epoch - 1]["val_acc"],
            "optimistic": _validation_optimistic(recipe.init_from),
        }
    if recipe.bn_recalibration_batches:
        before = evaluate(model, x_test, y_test)
        t0 = time.time()
        recalibrate_batchnorm(model, recalibration_images(xt, recipe))
        _atomic_save_tensors(model.state_dict(), out / "model.safetensors")
        summary["clean_acc_before_bn_recalibration"] = before
        summary["train_time_s"] = round(elapsed + time.time() - t0, 1)
    if recipe.val_examples:
        summary["validation"]["val_acc"] = evaluate(model, x_val, y_val)
    summary.update(final_accuracy(model, x_test, y_test))
    _atomic_write_json(summary, out / "summary.json")
    return summary


def _best_val_epoch(history: list[dict]) -> int:
    """The (1-based) epoch of the best validation accuracy; the earliest on a tie."""
    accs = [h["val_acc"] for h in history]
    return 1 + max(range(len(accs)), key=lambda i: (accs[i], -i))


def _check_counts(recipe: Recipe) -> None:
    """Refuse counts that would train nothing (``--epochs 0`` once measured a random initialisation and exited 0)."""
    for name in ("epochs", "batch_size"):
        if getattr(recipe, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(recipe, name)}")
    for name in ("val_examples", "patience"):
        if getattr(recipe, name) < 0:
            raise ValueError(f"{name} must be 0 (off) or positive, got {getattr(recipe, name)}")
    if recipe.train_examples is not None and recipe.train_examples < 1:
        raise ValueError(f"train_examples must be at least 1 (or None for all), got {recipe.train_examples}")


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


def _validation_optimistic(init_from: str | None) -> bool:
    """Whether the starting checkpoint may have trained on the validation images (then its figures flatter it)."""
    if init_from is None:
        return False
    try:
        card = load_card(init_from, CHECKPOINT_DIR)
    except (FileNotFoundError, ValueError):
        return True  # a file of unknown history
    return not card.get("recipe", {}).get("val_examples")


def _finished_summary(out: Path, recipe: Recipe, start_epoch: int, n_test: int) -> dict | None:
    """The summary a finished run in ``out`` wrote for ``recipe`` on ``n_test`` test images; None if it has none."""
    path = out / "summary.json"
    if start_epoch < recipe.epochs or not path.exists():
        return None
    summary = json.loads(path.read_text())
    if summary.get("recipe") != asdict(recipe) or summary.get("clean_acc_n_examples") != n_test:
        return None
    return summary


def recalibrate_checkpoint(
    name: str,
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    *,
    batches: int = KD_BN_BATCHES,
    log: Callable[[str], object] = print,
    eval_examples: int | None = None,
) -> dict:
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
    if "recipe" not in card:
        raise ValueError(f"the card of {name!r} records no training recipe: it was not trained by arbibench train")
    recipe = Recipe(**{**asdict(Recipe()), **card["recipe"]})
    if recipe.adversarial:
        raise ValueError(f"{name!r} was adversarially trained: its BatchNorm statistics are those of adversarial "
                         "batches, and clean ones would change its robustness; recalibrate standard models only")
    recipe = replace(recipe, bn_recalibration_batches=batches, bn_recalibration_augment=True)
    weights = _init_checkpoint(name)  # sha256-verified
    model = build_model(recipe.arch, recipe.method)
    model.load_state_dict(load_file(str(weights)))
    x_train, _ = read_cifar10_arrays("train", data_dir)
    x_test, y_test = read_cifar10_arrays("test", data_dir)
    x_test, y_test = x_test[:eval_examples], y_test[:eval_examples]
    t0 = time.time()
    before = evaluate(model, x_test, y_test)
    log(f"{name}: clean accuracy {before:.4f} with the shipped statistics")
    recalibrate_batchnorm(model, recalibration_images(torch.from_numpy(x_train), recipe))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_save_tensors(model.state_dict(), out / "model.safetensors")
    summary = {
        "recipe": asdict(recipe),
        "history": card.get("history", []),
        "train_time_s": round(card.get("train_time_s", 0.0) + time.time() - t0, 1),
        "recalibrated_from_sha256": sha256_file(weights),
        "clean_acc_before_bn_recalibration": before,
        **final_accuracy(model, x_test, y_test),
    }
    for key in ("init_sha256", "robust_check"):
        if key in card:
            summary[key] = card[key]
    _atomic_write_json(summary, out / "summary.json")
    return summary
