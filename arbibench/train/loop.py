"""The training loop: one resumable run of a recipe on the real CIFAR-10 train set.

Every epoch ends with an atomic checkpoint (weights, optimiser state, history), so a killed run restarts from its last
finished epoch and produces the same weights as an uninterrupted one: the shuffling and augmentation of epoch ``e``
are drawn from a generator seeded by ``(seed, e)``, and the learning rate is a pure function of the step. A run with
a validation split measures every epoch on it, ships its best epoch and may stop early; the test set is measured
once, on the weights the run ships.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from safetensors.torch import load_file
from torch import nn

from arbibench.clock import Lap
from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.files import atomic_write_json
from arbibench.models.architectures import build_model
from arbibench.models.layout import in_layout
from arbibench.models.zoo import sha256_file
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from arbibench.nn.quantizers import EDESign, ScheduledSign, set_training_progress
from arbibench.nn.scalings import LearnedScaleSign
from arbibench.train import accuracy
from arbibench.train.adversarial import catastrophic_overfitting_check, fgsm_random_start, robust_check
from arbibench.train.augmentation import apply_augmentation, draw_augmentation
from arbibench.train.batchnorm import recalibrate_batchnorm, recalibration_images
from arbibench.train.checkpoints import (
    atomic_save_tensors,
    init_checkpoint,
    load_matching,
    load_optimizer,
    optimizer_tensors,
)
from arbibench.train.execution import Execution, TimeLimitReached, float32_precision
from arbibench.train.recipes import Recipe, check_recipe, learning_rate, stage_method
from arbibench.train.selection import best_val_epoch, split_validation, validation_optimistic


def init_learned_scales(model: nn.Module) -> None:
    """Start every learned weight scale (XNOR-Net++) at mean|W| per output channel, the analytic scale."""
    for m in model.modules():
        if isinstance(m, (BinaryConv2d, BinaryLinear)) and isinstance(m.kernel_quantizer, LearnedScaleSign):
            dims = tuple(range(1, m.weight.dim()))
            with torch.no_grad():
                m.kernel_quantizer.alpha.copy_(m.weight.abs().mean(dim=dims).view_as(m.kernel_quantizer.alpha))


def latent_binary_weights(model: nn.Module) -> list[torch.Tensor]:
    """The real-valued weights behind binary kernels (the ones clipped and spared weight decay in step 2)."""
    return [
        m.weight
        for m in model.modules()
        if isinstance(m, (BinaryConv2d, BinaryLinear)) and m.kernel_quantizer is not None
    ]


def make_optimizer(recipe: Recipe, model: nn.Module, epoch: int) -> torch.optim.Optimizer:
    """The recipe's optimiser for the step ``epoch`` belongs to (step 2: no weight decay on latent binary weights).
    On a GPU the fused kernels (one launch for every parameter) compute the same update."""
    step2 = epoch >= recipe.step1_epochs > 0
    latent = {id(p) for p in latent_binary_weights(model)} if step2 else set()
    # ReActNet decays convolution kernels only; every other recipe decays every parameter
    spared = {id(p) for p in model.parameters() if p.dim() != 4} if recipe.weight_decay_scope == "conv" else set()
    wd = recipe.step2_weight_decay if step2 and recipe.step2_weight_decay is not None else recipe.weight_decay
    decay = [p for p in model.parameters() if id(p) not in latent | spared]
    groups: list[dict[str, Any]] = [{"params": decay, "weight_decay": wd}]
    if latent | spared:  # weight decay would pull the latent weights' signs towards flipping
        groups.append({"params": [p for p in model.parameters() if id(p) in latent | spared], "weight_decay": 0.0})
    fused = True if next(model.parameters()).device.type == "cuda" else None
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=recipe.lr, momentum=0.9, nesterov=recipe.nesterov, fused=fused)
    if recipe.optimizer == "adam":
        return torch.optim.Adam(groups, lr=recipe.lr, fused=fused, foreach=None if fused else True)
    raise ValueError(f"unknown optimizer {recipe.optimizer!r}; use 'sgd' or 'adam'")


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """ReActNet's distributional loss: cross-entropy of the student's softmax to the teacher's, batch mean."""
    return -(F.softmax(teacher_logits, dim=1) * F.log_softmax(student_logits, dim=1)).sum(dim=1).mean()


def memory_layout(model: nn.Module, channels_last: bool) -> nn.Module:
    """``model`` in channels_last when asked: oneDNN then skips the reorders of the 16-channel first stage, which is
    faster for some BNNs on some CPUs and slower for others (``benchmarks/train_throughput.py --layouts``). The
    arithmetic is the same up to the order of float sums, so a run may resume in the other layout."""
    return in_layout(model, channels_last) if channels_last else model


def schedule_ede(model: nn.Module, recipe: Recipe) -> None:
    """Start IR-Net's EDE temperature where the recipe says (the official ResNet-20 W1/A1 code: 1e-3)."""
    if recipe.ede_t_min is not None:
        for m in model.modules():
            if isinstance(m, EDESign):
                m.t_min = recipe.ede_t_min


def has_schedule(model: nn.Module) -> bool:
    """Whether a quantizer's surrogate changes with training progress (IR-Net's EDE): a compiled graph of such a
    model holds for one epoch only."""
    return any(isinstance(m, ScheduledSign) for m in model.modules())


@dataclass
class _Data:
    """The run's images (uint8 NCHW): training, validation (held out from training), test, robust-check."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_check: np.ndarray
    y_check: np.ndarray

    @classmethod
    def load(cls, recipe: Recipe, data_dir: str | Path | None, eval_examples: int | None) -> _Data:
        x_train, y_train = read_cifar10_arrays("train", data_dir)
        x_train, y_train, x_val, y_val = split_validation(x_train, y_train, recipe.val_examples)
        x_test, y_test = read_cifar10_arrays("test", data_dir)
        n_check = recipe.robust_check_images
        x_check, y_check = x_test[len(y_test) - n_check :], y_test[len(y_test) - n_check :]
        if recipe.train_examples is not None:
            x_train, y_train = x_train[: recipe.train_examples], y_train[: recipe.train_examples]
        return cls(x_train, y_train, x_val, y_val, x_test[:eval_examples], y_test[:eval_examples], x_check, y_check)

    def resident(self, device: torch.device) -> _Resident:
        """The training and held-out images on ``device`` (uint8, copied once for the whole run)."""
        def put(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(device)

        return _Resident(put(self.x_train), put(self.y_train).long(), put(self.x_val), put(self.y_val).long())


@dataclass
class _Resident:
    """The images every epoch reads, where the model computes (on a GPU: 150 MB of uint8, never sent again)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


@dataclass
class _Run:
    """What a run carries from epoch to epoch, and what its checkpoint records."""

    model: nn.Module
    opt: torch.optim.Optimizer
    teacher: nn.Module | None
    start_epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    # wall seconds of each epoch (training, measuring, checkpointing) and the threads it ran on; kept apart from the
    # history, which is a function of the recipe alone and equal between a resumed run and an uninterrupted one
    epoch_seconds: list[dict[str, Any]] = field(default_factory=list)
    init_sha256: str | None = None
    validation: dict[str, Any] | None = None
    execution: Execution = field(default_factory=Execution)
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None  # the compiled training forward, when compiled
    teacher_forward: Callable[[torch.Tensor], torch.Tensor] | None = None  # the teacher's, compiled with it


def _check_recipe(recipe: Recipe, out: Path) -> None:
    """Everything a run can be refused for before its folder exists: the recipe, and a starting point or teacher
    that names no checkpoint (a resumed run's start is in its checkpoint already)."""
    check_recipe(recipe)
    for spec in (recipe.teacher, recipe.init_from if not (out / "state.json").exists() else None):
        if spec:
            init_checkpoint(spec)


def _read_state(out: Path, recipe: Recipe) -> dict[str, Any] | None:
    """The run's checkpoint record, or None for a new run; a different recipe in ``out`` is an error."""
    state_json = out / "state.json"
    if not state_json.exists():
        return None
    meta: dict[str, Any] = json.loads(state_json.read_text())
    meta["recipe"] = {**asdict(Recipe()), **meta["recipe"]}  # a field added later ran with its default
    if meta["recipe"] != asdict(recipe):
        raise ValueError(
            f"{out} holds a run with a different recipe ({meta['recipe']}); use another --out or delete it."
        )
    return meta


def _start(
    recipe: Recipe, out: Path, meta: dict[str, Any] | None, log: Callable[[str], object], execution: Execution
) -> _Run:
    """The model, optimiser and teacher of the epoch the run stands at: the last finished one, else the first."""
    epoch = meta["epoch"] if meta else 0
    device = execution.torch_device
    model = memory_layout(build_model(recipe.arch, stage_method(recipe, epoch)), execution.channels_last)
    teacher = None
    if recipe.teacher:
        teacher = build_model(recipe.arch, "fp")
        teacher.load_state_dict(load_file(str(init_checkpoint(recipe.teacher))))
        teacher = memory_layout(teacher.eval().requires_grad_(False), execution.channels_last).to(device)
    # The sha256 of the starting weights goes into the card: a zoo name alone stops naming them once a run that
    # continues a zoo model (``--init-from resnet20_bireal``) is exported over it.
    init_sha256 = meta.get("init_sha256") if meta is not None else None
    if recipe.init_from and meta is None:
        init_path = init_checkpoint(recipe.init_from)
        init_sha256 = sha256_file(init_path)
        n = load_matching(model, load_file(str(init_path)))
        log(f"initialised {n}/{len(model.state_dict())} tensors from {recipe.init_from}")
    model = model.to(device)
    run = _Run(model, make_optimizer(recipe, model, epoch), teacher, init_sha256=init_sha256, execution=execution)
    if meta is not None:
        model.load_state_dict(load_file(str(out / "model.safetensors")))
        load_optimizer(run.opt, load_file(str(out / "optimizer.safetensors")), meta["optimizer"])
        run.start_epoch, run.history, run.elapsed = meta["epoch"] + 1, meta["history"], meta["elapsed_s"]
        run.validation = meta.get("validation")
        run.epoch_seconds = meta.get("epoch_seconds", [])
        if meta.get("stopped_early"):
            run.start_epoch = recipe.epochs
        log(f"resuming {out} at epoch {run.start_epoch + 1}/{recipe.epochs}")
    return run


def train(
    recipe: Recipe,
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    log: Callable[[str], object] = print,
    *,
    eval_examples: int | None = None,
    channels_last: bool = False,
    compile_model: bool = False,
    execution: Execution | None = None,
) -> dict[str, Any]:
    """Train (or resume) ``recipe`` into ``out_dir``; returns the final summary (also in ``out_dir/summary.json``).

    The summary's ``clean_acc`` is measured on the first ``eval_examples`` test images (default: all 10,000).
    ``execution`` is how the run computes, not what (:class:`~arbibench.train.execution.Execution`: device, layout,
    ``torch.compile``, training autocast, a time limit), so it is not part of the recipe; each epoch's record says
    how it ran. ``channels_last`` and ``compile_model`` are shorthands for the same fields. A run that reaches its
    time limit raises :class:`~arbibench.train.execution.TimeLimitReached` after a checkpointed epoch; the same call
    resumes it.
    """
    out = Path(out_dir)
    execution = execution or Execution(channels_last=channels_last, compile_model=compile_model)
    float32_precision(execution.torch_device)
    _check_recipe(recipe, out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(recipe.seed)
    run = _start(recipe, out, _read_state(out, recipe), log, execution)
    data = _Data.load(recipe, data_dir, eval_examples)
    finished = finished_summary(out, recipe, run.start_epoch, len(data.y_test))
    if finished is not None:
        # Running a finished run again (the queue after a continuation the zoo kept its model over) must not
        # re-estimate statistics already re-estimated, nor measure "before re-estimation" on the re-estimated weights.
        log(f"{out} is finished: clean accuracy {finished['clean_acc']:.4f} (from its summary.json)")
        return finished
    resident = data.resident(execution.torch_device)
    if recipe.val_examples and run.validation is None:
        # the starting point's own validation accuracy: a continuation must beat it to replace the model it continues
        run.validation = {
            "init_val_acc": (accuracy.top1_accuracy(run.model, resident.x_val, resident.y_val)
                             if recipe.init_from else None)
        }
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    watch, started = Lap(), time.monotonic()
    with Progress(*columns) as progress:
        for epoch in range(run.start_epoch, recipe.epochs):
            if _epoch(recipe, run, data, resident, epoch, out, progress, log, watch):
                break
            limit = execution.time_limit_s
            if limit is not None and epoch + 1 < recipe.epochs:
                # stop before an epoch that would end past the limit (the last one's seconds are the estimate)
                if time.monotonic() - started + run.epoch_seconds[-1]["seconds"] > limit:
                    raise TimeLimitReached(epoch + 1, recipe.epochs, str(out))
    return _finish(recipe, run, data, out)


def _epoch(
    recipe: Recipe, run: _Run, data: _Data, resident: _Resident, epoch: int, out: Path, progress: Progress,
    log: Callable[[str], object], watch: Lap,
) -> bool:
    """Train one epoch, measure it, checkpoint it; True when the run stops early. Its seconds leave out the time the
    queue held the process stopped (recorded apart)."""
    watch.lap()
    ex = run.execution
    if recipe.step1_epochs and epoch == recipe.step1_epochs:  # step 2: binarize the kernels
        step1_state = run.model.state_dict()
        run.model = memory_layout(build_model(recipe.arch, stage_method(recipe, epoch)), ex.channels_last)
        run.model = run.model.to(ex.torch_device)
        load_matching(run.model, step1_state)
        init_learned_scales(run.model)
        run.opt = make_optimizer(recipe, run.model, epoch)
        log(f"step 2 from epoch {epoch + 1}: binary weights")
        run.forward = None  # a new module: compiled anew below
    if ex.compile_model and (run.forward is None or has_schedule(run.model)):
        # A scheduled surrogate changes every epoch, so its graph is compiled again each epoch; dropping the old
        # graphs first keeps dynamo under its recompile limit, past which it would silently run eager.
        torch._dynamo.reset()
        # dynamo traces through the lru_cache of the surrogate-spec parser and warns so at every compile; the
        # parser is a pure function of its string, so the cache only saves time and the warning is noise
        warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
        if ex.compile_mode == "default":
            run.forward = torch.compile(run.model)
        else:
            run.forward = torch.compile(run.model, mode=ex.compile_mode)
        if run.teacher is not None:
            # the FP teacher's eager forward is about a fifth of a distilled step; compiled, it recompiles in
            # seconds after a reset (benchmarks/train_throughput.py --layouts --compile measures both together)
            run.teacher_forward = (torch.compile(run.teacher) if ex.compile_mode == "default"
                                   else torch.compile(run.teacher, mode=ex.compile_mode))
    steps = math.ceil(len(data.y_train) / recipe.batch_size)
    task = progress.add_task(f"epoch {epoch + 1}/{recipe.epochs}", total=steps, info="")
    loss, acc = _optimise(recipe, run, resident, epoch, progress, task)
    run.history.append({"epoch": epoch + 1, "train_loss": loss, "train_acc": acc})
    look, measured, stopped_early = _measure(recipe, run, data, resident, epoch, out, log)
    seconds, stopped = watch.lap()
    run.elapsed += seconds
    run.epoch_seconds.append(
        {"epoch": epoch + 1, "seconds": round(seconds, 2), "stopped_seconds": round(stopped, 1),
         "threads": torch.get_num_threads(), **ex.record()}
    )
    progress.update(task, info=f"loss {loss:.3f} acc {acc:.3f} {look} {measured:.3f}")
    opt_tensors, opt_meta = optimizer_tensors(run.opt)
    atomic_save_tensors(run.model.state_dict(), out / "model.safetensors")
    atomic_save_tensors(opt_tensors, out / "optimizer.safetensors")
    atomic_write_json(
        {
            "recipe": asdict(recipe),
            "epoch": epoch,
            "history": run.history,
            "elapsed_s": run.elapsed,
            "epoch_seconds": run.epoch_seconds,
            "optimizer": opt_meta,
            "stopped_early": stopped_early,
            "init_sha256": run.init_sha256,
            "validation": run.validation,
        },
        out / "state.json",
    )
    log(f"epoch {epoch + 1}: {run.history[-1]}")
    return stopped_early


PROGRESS_EVERY = 25  # steps between progress-bar updates: each reads the running loss back from the device


def _optimise(
    recipe: Recipe, run: _Run, resident: _Resident, epoch: int, progress: Progress, task: Any
) -> tuple[float, float]:
    """One pass over the training images; returns (mean loss, accuracy) of the epoch. The shuffle and augmentation
    draws come from the epoch's CPU generator on every device; loss and accuracy are summed where the model computes
    and read back every ``PROGRESS_EVERY`` steps only, so a GPU never waits for the host within an epoch."""
    xt, yt = resident.x_train, resident.y_train
    device = xt.device
    steps_per_epoch = math.ceil(len(yt) / recipe.batch_size)
    two_step = recipe.step1_epochs > 0
    stage_start = recipe.step1_epochs if two_step and epoch >= recipe.step1_epochs else 0
    stage_end = recipe.step1_epochs if two_step and epoch < recipe.step1_epochs else recipe.epochs
    stage_total = (stage_end - stage_start) * steps_per_epoch
    model, opt, ex = run.model, run.opt, run.execution
    clipped = latent_binary_weights(model) if recipe.clip_latent_weights else []
    gen = torch.Generator().manual_seed(recipe.seed * 100_003 + epoch)
    perm = torch.randperm(len(yt), generator=gen).to(device)
    model.train()
    schedule_ede(model, recipe)
    set_training_progress(model, epoch / recipe.epochs)  # IR-Net's EDE schedule, a function of the epoch
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for s in range(steps_per_epoch):
        idx = perm[s * recipe.batch_size : (s + 1) * recipe.batch_size]
        xb = apply_augmentation(xt[idx], *draw_augmentation(len(idx), gen)).float().div_(255)
        if ex.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        yb = yt[idx]
        for g in opt.param_groups:
            g["lr"] = learning_rate(recipe, (epoch - stage_start) * steps_per_epoch + s, stage_total)
        x_in = xb
        if recipe.adversarial is not None:
            x_in = fgsm_random_start(model, xb, yb, recipe.adv_eps, recipe.adv_step, gen)
        with ex.autocast_context():
            logits = (model if run.forward is None else run.forward)(x_in)  # a compiled module has no truth value
            loss = _loss(recipe, run, logits, xb, yb)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)  # loss.backward(), which the type stubs leave unannotated
        opt.step()
        if clipped:
            with torch.no_grad():
                torch._foreach_clamp_min_(clipped, -1.0)
                torch._foreach_clamp_max_(clipped, 1.0)
        loss_sum += loss.detach().double() * len(yb)
        correct += (logits.detach().argmax(1) == yb).sum()
        if (s + 1) % PROGRESS_EVERY == 0 or s + 1 == steps_per_epoch:
            seen = min((s + 1) * recipe.batch_size, len(yt))
            progress.update(task, completed=s + 1,
                            info=f"loss {loss_sum.item() / seen:.3f} acc {correct.item() / seen:.3f}")
    return loss_sum.item() / len(yt), correct.item() / len(yt)


def _loss(recipe: Recipe, run: _Run, logits: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    """The recipe's training loss: cross-entropy, or the teacher's distributional loss (plus cross-entropy)."""
    if run.teacher is None:
        return F.cross_entropy(logits, yb)
    with torch.no_grad():
        teacher_logits = (run.teacher if run.teacher_forward is None else run.teacher_forward)(xb)
    loss = recipe.kd_weight * distillation_loss(logits, teacher_logits)
    if recipe.ce_weight:
        loss = loss + recipe.ce_weight * F.cross_entropy(logits, yb)
    return loss


def _measure(
    recipe: Recipe, run: _Run, data: _Data, resident: _Resident, epoch: int, out: Path, log: Callable[[str], object]
) -> tuple[str, float, bool]:
    """The epoch's look (validation, else the first 1000 test images) and its checks; True in the last place when
    the run stops here (no better validation accuracy for ``patience`` epochs, or catastrophic overfitting)."""
    model, history = run.model, run.history
    stopped_early = False
    if recipe.val_examples:  # selection on held-out training images; the test set is not looked at
        look = "val"
        history[-1]["val_acc"] = measured = accuracy.top1_accuracy(model, resident.x_val, resident.y_val)
        best = best_val_epoch(history)
        if best == epoch + 1:
            atomic_save_tensors(model.state_dict(), out / "best_val.safetensors")
        elif recipe.patience and epoch + 1 - best >= recipe.patience:
            stopped_early = True
            log(f"epoch {epoch + 1}: no better validation accuracy for {recipe.patience} epochs; stopping")
    else:
        look = "test@1000"
        history[-1]["test_acc_1000"] = measured = accuracy.top1_accuracy(model, data.x_test[:1000], data.y_test[:1000])
    if recipe.robust_check_images:
        pgd_acc = robust_check(model, data.x_check, data.y_check, recipe.adv_eps)
        best_pgd = max((h["pgd10_acc"] for h in history[:-1]), default=0.0)
        history[-1]["pgd10_acc"] = pgd_acc
        if pgd_acc >= best_pgd:
            atomic_save_tensors(model.state_dict(), out / "best.safetensors")
        elif pgd_acc < 0.5 * best_pgd:  # catastrophic overfitting: keep the best epoch and stop
            model.load_state_dict(load_file(str(out / "best.safetensors")))
            history[-1]["catastrophic_overfitting"] = True
            stopped_early = True
            log(f"epoch {epoch + 1}: PGD-10 accuracy fell from {best_pgd:.3f} to {pgd_acc:.3f}: catastrophic "
                "overfitting; stopping with the best epoch's weights")
    return look, measured, stopped_early


def _finish(recipe: Recipe, run: _Run, data: _Data, out: Path) -> dict[str, Any]:
    """The shipped weights (best validation epoch, re-estimated statistics) and the summary, measured once, on the
    CPU and in float32 whatever the run trained on, as every shipped checkpoint is measured."""
    run.model, run.forward, run.teacher_forward = run.model.float().cpu(), None, None
    model, history = run.model, run.history
    set_training_progress(model, 1.0)  # the deployed state, the one a freshly built model starts in
    summary: dict[str, Any] = {
        "recipe": asdict(recipe), "history": history, "train_time_s": round(run.elapsed, 1),
        "epoch_seconds": run.epoch_seconds,
    }
    if run.init_sha256 is not None:
        summary["init_sha256"] = run.init_sha256
    if recipe.robust_check_images:
        summary["robust_check"] = catastrophic_overfitting_check(recipe, history, len(data.y_check))
    if recipe.val_examples:
        best = best_val_epoch(history)
        model.load_state_dict(load_file(str(out / "best_val.safetensors")))
        atomic_save_tensors(model.state_dict(), out / "model.safetensors")  # the run's result is the chosen epoch
        summary["validation"] = {
            **(run.validation or {}),
            "examples": recipe.val_examples,
            "split": f"the last {recipe.val_examples} CIFAR-10 training images (never trained on by this run)",
            "selection": "the epoch with the best validation accuracy"
            + (f"; stop after {recipe.patience} epochs without a better one" if recipe.patience else ""),
            "best_epoch": best,
            "epochs_run": len(history),
            "stopped_early": len(history) < recipe.epochs,
            "val_acc_best_epoch": history[best - 1]["val_acc"],
            "optimistic": validation_optimistic(recipe.init_from),
        }
    if recipe.bn_recalibration_batches:
        before = accuracy.top1_accuracy(model, data.x_test, data.y_test)
        watch = Lap()
        recalibrate_batchnorm(model, recalibration_images(torch.from_numpy(data.x_train), recipe))
        atomic_save_tensors(model.state_dict(), out / "model.safetensors")
        summary["clean_acc_before_bn_recalibration"] = before
        summary["train_time_s"] = round(run.elapsed + watch.lap()[0], 1)
    if recipe.val_examples:
        summary["validation"]["val_acc"] = accuracy.top1_accuracy(model, data.x_val, data.y_val)
    summary.update(accuracy.final_accuracy(model, data.x_test, data.y_test))
    atomic_write_json(summary, out / "summary.json")
    return summary


def finished_summary(out: Path, recipe: Recipe, start_epoch: int, n_test: int) -> dict[str, Any] | None:
    """The summary a finished run in ``out`` wrote for ``recipe`` on ``n_test`` test images; None if it has none."""
    path = out / "summary.json"
    if start_epoch < recipe.epochs or not path.exists():
        return None
    summary: dict[str, Any] = json.loads(path.read_text())
    ran = {**asdict(Recipe()), **summary.get("recipe", {})}  # a field added later ran with its default
    if ran != asdict(recipe) or summary.get("clean_acc_n_examples") != n_test:
        return None
    return summary
