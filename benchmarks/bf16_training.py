"""Does bfloat16 autocast change what a BNN learns? The check that decides whether a run may train under
``--autocast bf16`` (for the zoo: it may not, docs/benchmarks/training.md).

Two measurements on the real CIFAR-10 training images, from a shipped zoo checkpoint:

1. **Gradient agreement.** On the same weights and the same augmented batches, the long recipe's loss (distillation
   from the FP twin) is differentiated in float32 and under bf16 autocast. The cosine between the two gradients of
   every trained tensor says how far bf16's rounding moves a step; the cosine between the float32 gradients of two
   different batches is the scale that matters, since SGD-type training already follows one noisy batch at a time.
2. **Training A/B.** The long recipe cut to ``--epochs`` epochs, run from the same checkpoint, seed and batch order
   under each arm: float32, bf16 autocast (``arbibench train --autocast bf16``), and bf16 with the last epoch
   resumed in float32. Each epoch's held-out accuracy (the 5,000 held-out training images, never the test set) and
   seconds are stored; the summary gives each arm's paired difference from float32 over the seeds.

    .venv/bin/python benchmarks/bf16_training.py --model resnet20_xnor --epochs 2 --seeds 0,1,2 \\
        --arms fp32,bf16,bf16_then_fp32 --out docs/measurements/bf16_training_xnor.json

Run it with nothing else on the cores (pause the queue): the seconds are part of the answer.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import mean, median, stdev
from typing import Any

import torch

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.files import atomic_write_json
from arbibench.machine import cpu_model
from arbibench.models.zoo import load_model
from arbibench.nn import set_training_progress
from arbibench.train import augment, default_recipe, train
from arbibench.train.execution import Execution, TimeLimitReached
from arbibench.train.loop import distillation_loss

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _gradients(net: torch.nn.Module, teacher: torch.nn.Module, x: torch.Tensor, bf16: bool) -> dict[str, torch.Tensor]:
    """The gradient of the long recipe's loss on ``x`` for every trained tensor, by name, flattened, in float32."""
    net.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        with torch.no_grad():
            target = teacher(x)
        loss = distillation_loss(net(x), target)
    torch.autograd.backward(loss)
    return {n: p.grad.detach().float().flatten().clone() for n, p in net.named_parameters() if p.grad is not None}


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two flat vectors (1.0 for two zero vectors: they agree)."""
    na, nb = a.norm(), b.norm()
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb).clamp_min(1e-30))


def gradient_agreement(name: str, x_train: Any, batches: int, batch_size: int) -> dict[str, Any]:
    """Per batch: cosine(float32, bf16) over all tensors and its smallest per-tensor value, and cosine(float32 of
    this batch, float32 of the next batch) as the scale of minibatch noise."""
    net = load_model(name).train()
    set_training_progress(net, 0.5)
    teacher = load_model(name.split("_")[0] + "_fp").requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    xs = [augment(torch.from_numpy(x_train[i * batch_size : (i + 1) * batch_size]), gen).float().div_(255)
          for i in range(batches + 1)]
    # BatchNorm in train mode updates its running statistics on each forward: keep the weights fixed, the
    # statistics do not enter the gradient of a train-mode forward.
    f32 = [_gradients(net, teacher, x, bf16=False) for x in xs]
    rows: list[dict[str, Any]] = []
    for i in range(batches):
        b16 = _gradients(net, teacher, xs[i], bf16=True)
        per_tensor = {n: cosine(f32[i][n], b16[n]) for n in f32[i]}
        worst = min(per_tensor, key=per_tensor.__getitem__)
        rows.append({
            "batch": i,
            "cos_fp32_bf16": cosine(torch.cat(list(f32[i].values())), torch.cat(list(b16.values()))),
            "min_tensor_cos_fp32_bf16": per_tensor[worst],
            "min_tensor": worst,
            "cos_fp32_next_batch": cosine(torch.cat(list(f32[i].values())), torch.cat(list(f32[i + 1].values()))),
        })
        print(f"batch {i}: cos(fp32, bf16) {rows[-1]['cos_fp32_bf16']:.4f} (smallest tensor "
              f"{per_tensor[worst]:.4f}, {worst}); cos(fp32, next batch's fp32) "
              f"{rows[-1]['cos_fp32_next_batch']:.4f}", flush=True)
    return {"batches": rows,
            "median_cos_fp32_bf16": median(r["cos_fp32_bf16"] for r in rows),
            "median_min_tensor_cos": median(r["min_tensor_cos_fp32_bf16"] for r in rows),
            "median_cos_next_batch": median(r["cos_fp32_next_batch"] for r in rows)}


ARMS = {  # label: (autocast, float32 epochs at the end)
    "fp32": (None, 0),
    "bf16": ("bf16", 0),
    "bf16_then_fp32": ("bf16", 1),  # bf16 for every epoch but the last, which trains in float32
}


def _train_arm(recipe: Any, out: Path, data_dir: Path, autocast: str | None, float32_last: int) -> dict[str, Any]:
    """``recipe`` under ``autocast`` for its first epochs and in float32 for its last ``float32_last``: the run is
    cut into one-epoch pieces (a time limit no epoch fits in) while autocast lasts, then resumed in float32, as a
    user resumes a run with other execution flags."""
    while float32_last and autocast is not None:
        try:
            train(recipe, out, data_dir, log=lambda m: None, eval_examples=500,
                  execution=Execution(autocast=autocast, time_limit_s=1e-9))
        except TimeLimitReached as stop:
            if stop.epochs_done >= recipe.epochs - float32_last:
                break
            continue
        raise AssertionError("the autocast pieces ran to the end: more float32 epochs than the recipe has")
    return train(recipe, out, data_dir, log=lambda m: None, eval_examples=500,
                 execution=Execution(autocast=None if float32_last else autocast))


def training_ab(name: str, epochs: int, seed: int, arms: list[str], data_dir: Path, work: Path) -> dict[str, Any]:
    """One seed of the A/B: the same recipe, start and batch order under each arm's execution."""
    arch, _, method = name.partition("_")
    recipe = replace(default_recipe(method, kind="long", arch=arch), epochs=epochs, seed=seed)
    out: dict[str, Any] = {}
    for label in arms:
        start = time.perf_counter()
        summary = _train_arm(recipe, work / f"{label}-{seed}", data_dir, *ARMS[label])
        history = summary["history"]
        out[label] = {
            "val_acc": [h["val_acc"] for h in history],
            "train_loss": [round(h["train_loss"], 4) for h in history],
            "epoch_seconds": [e["seconds"] for e in summary["epoch_seconds"]],
            "autocast": [e["autocast"] for e in summary["epoch_seconds"]],
            "wall_seconds": round(time.perf_counter() - start, 1),
            # what decides shipping: the best epoch's weights after float32 BatchNorm re-estimation
            "val_acc_reestimated": summary["validation"]["val_acc"],
        }
        print(f"seed {seed} {label}: held-out {out[label]['val_acc']}, train loss {out[label]['train_loss']}, "
              f"epochs {out[label]['epoch_seconds']} s", flush=True)
    return out


def paired_difference(runs: list[dict[str, Any]], arm: str) -> dict[str, float] | None:
    """``arm``'s last-epoch held-out accuracy minus float32's, in points, over the seeds that ran both: the mean,
    the paired t (mean over its standard error) and how many seeds came out lower; None under two seeds."""
    diffs = [100 * (r["arms"][arm]["val_acc"][-1] - r["arms"]["fp32"]["val_acc"][-1])
             for r in runs if arm in r["arms"] and "fp32" in r["arms"]]
    if len(diffs) < 2:
        return None
    se = stdev(diffs) / math.sqrt(len(diffs))
    return {"mean": mean(diffs), "t": mean(diffs) / se if se > 0 else math.copysign(math.inf, mean(diffs)),
            "n": len(diffs), "lower": sum(d < 0 for d in diffs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet20_xnor")
    p.add_argument("--epochs", type=int, default=2, help="epochs of each arm of the training A/B (0: skip it)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds of the training A/B (each its batch order); "
                   "seeds already in --out are kept, not run again")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms of the A/B ({', '.join(ARMS)})")
    p.add_argument("--batches", type=int, default=6, help="batches of the gradient check")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    earlier: dict[str, Any] = {}
    if args.out is not None and args.out.exists():
        earlier = json.loads(args.out.read_text())
        if earlier.get("model") != args.model:
            raise SystemExit(f"{args.out} measures {earlier.get('model')}, not {args.model}: name another --out")
    result: dict[str, Any] = {
        "command": "benchmarks/bf16_training.py " + " ".join(sys.argv[1:]),
        "cpu": cpu_model(), "torch": torch.__version__, "threads": args.threads, "model": args.model,
    }
    if "gradients" in earlier:
        result["gradients"] = earlier["gradients"]
    else:
        x_train, _ = read_cifar10_arrays("train", args.data_dir)
        result["gradients"] = gradient_agreement(args.model, x_train, args.batches, args.batch_size)
    arms = [a for a in args.arms.split(",") if a]
    if unknown := [a for a in arms if a not in ARMS]:
        raise SystemExit(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    runs = [r for r in earlier.get("training", []) if r["epochs"] == args.epochs]
    for seed in (int(s) for s in args.seeds.split(",") if s) if args.epochs else ():
        run = next((r for r in runs if r["seed"] == seed), None)
        if run is None:
            run = {"recipe": "long", "epochs": args.epochs, "seed": seed, "arms": {}}
            runs.append(run)
        todo = [a for a in arms if a not in run["arms"]]
        if not todo:
            continue
        work = Path(tempfile.mkdtemp(prefix="arbibench-bf16-"))
        try:
            run["arms"].update(training_ab(args.model, args.epochs, seed, todo, args.data_dir, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if args.out is not None:  # after each seed: an interrupted measurement keeps what it finished
            atomic_write_json({**result, "training": runs}, args.out)
    result["training"] = runs
    for r in runs:
        finals = ", ".join(f"{a} {v['val_acc'][-1]:.4f}" for a, v in r["arms"].items())
        print(f"seed {r['seed']}, held-out after {r['epochs']} epochs: {finals}")
    for arm in ARMS:
        if arm != "fp32" and (paired := paired_difference(runs, arm)) is not None:
            print(f"{arm} - fp32, held-out points: mean {paired['mean']:+.2f}, paired t {paired['t']:.2f} on "
                  f"{paired['n'] - 1} degrees of freedom, lower on {paired['lower']} of {paired['n']} seeds")
    if args.out is not None:
        atomic_write_json(result, args.out)


if __name__ == "__main__":
    main()
