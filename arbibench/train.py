"""Training recipes for the zoo: short, deterministic, resumable runs on the real CIFAR-10 train set.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from safetensors.torch import load_file, save_file

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.models.architectures import build_model
from arbibench.models.methods import get_method
from arbibench.nn.quantizers import set_training_progress


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
# Full-length schedules of the papers' CIFAR-10 experiments, for users with a GPU (``--paper``).
PAPER_EPOCHS = {"fp": 200, "bnn": 400, "xnor": 400, "dorefa": 400, "bireal": 400, "irnet": 400, "reactnet": 256,
                "xnorpp": 400}


def default_recipe(method: str, *, paper: bool = False) -> Recipe:
    get_method(method)
    r = Recipe(**asdict(RECIPES[method])) if method in RECIPES else Recipe(method=method)
    if paper:
        r.epochs = PAPER_EPOCHS.get(method, 200)
    return r


def learning_rate(recipe: Recipe, step: int, total_steps: int) -> float:
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


def _init_checkpoint(spec: str) -> Path:
    """A zoo model name resolves to its sha256-verified shipped checkpoint; anything else is a file path."""
    from arbibench.models.zoo import ZOO, verified_checkpoint

    if spec in ZOO:
        return verified_checkpoint(ZOO[spec])
    if not Path(spec).is_file():
        raise FileNotFoundError(f"init_from {spec!r} is neither a zoo model name nor an existing checkpoint file")
    return Path(spec)


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
    torch.manual_seed(recipe.seed)
    model = build_model(recipe.arch, recipe.method)
    if recipe.init_from:
        src = load_file(str(_init_checkpoint(recipe.init_from)))
        own = model.state_dict()
        matched = {k: v for k, v in src.items() if k in own and own[k].shape == v.shape}
        model.load_state_dict(matched, strict=False)
        log(f"initialised {len(matched)}/{len(own)} tensors from {recipe.init_from}")
    if recipe.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=recipe.lr, momentum=0.9, nesterov=True, weight_decay=recipe.weight_decay
        )
    elif recipe.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    else:
        raise ValueError(f"unknown optimizer {recipe.optimizer!r}; use 'sgd' or 'adam'")

    start_epoch, history, elapsed = 0, [], 0.0
    if state_json.exists():
        meta = json.loads(state_json.read_text())
        if meta["recipe"] != asdict(recipe):
            raise ValueError(
                f"{out} holds a run with a different recipe ({meta['recipe']}); use another --out or delete it."
            )
        model.load_state_dict(load_file(str(out / "model.safetensors")))
        _load_optimizer(opt, load_file(str(out / "optimizer.safetensors")), meta["optimizer"])
        start_epoch, history, elapsed = meta["epoch"] + 1, meta["history"], meta["elapsed_s"]
        log(f"resuming {out} at epoch {start_epoch + 1}/{recipe.epochs}")

    x_train, y_train = read_cifar10_arrays("train", data_dir)
    x_test, y_test = read_cifar10_arrays("test", data_dir)
    x_test, y_test = x_test[:eval_examples], y_test[:eval_examples]
    if recipe.train_examples is not None:
        x_train, y_train = x_train[: recipe.train_examples], y_train[: recipe.train_examples]
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    steps_per_epoch = math.ceil(len(yt) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs

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
                    g["lr"] = learning_rate(recipe, epoch * steps_per_epoch + s, total)
                logits = model(xb)
                loss = F.cross_entropy(logits, yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_sum += loss.item() * len(yb)
                correct += (logits.argmax(1) == yb).sum().item()
                seen += len(yb)
                progress.update(task, advance=1, info=f"loss {loss_sum / seen:.3f} acc {correct / seen:.3f}")
            test_acc = evaluate(model, x_test[:1000], y_test[:1000])  # a quick look; the card uses all
            elapsed += time.time() - t0
            history.append(
                {
                    "epoch": epoch + 1,
                    "train_loss": loss_sum / seen,
                    "train_acc": correct / seen,
                    "test_acc_1000": test_acc,
                }
            )
            progress.update(task, info=f"loss {loss_sum / seen:.3f} acc {correct / seen:.3f} test@1000 {test_acc:.3f}")
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
                },
                state_json,
            )
            log(f"epoch {epoch + 1}: {history[-1]}")

    set_training_progress(model, 1.0)  # the deployed state, the one a freshly built model starts in
    summary = {
        "recipe": asdict(recipe),
        "history": history,
        "train_time_s": round(elapsed, 1),
        "clean_acc": evaluate(model, x_test, y_test),
        "clean_acc_n_examples": len(y_test),
        "clean_acc_first500": evaluate(model, x_test[:500], y_test[:500]),
        "torch_threads": torch.get_num_threads(),
    }
    _atomic_write_json(summary, out / "summary.json")
    return summary
