"""Channels-last vs NCHW for zoo models on the CPU: attack step time, prediction agreement, AutoAttack end to end.

``load_model`` puts a float network in channels-last on the CPU (arbibench/models/layout.py); this measures why, and
what it costs, per model:

- seconds per forward + backward pass at ``--batch`` (an attack step), median of ``--reps``, in both layouts;
- on the first ``--n`` CIFAR-10 test images: how many predictions differ between the layouts, and the largest logit
  difference (round-off for a float network; sign flips for a BNN);
- with ``--autoattack K``: AutoAttack's standard version on the first K correctly classified images in each layout,
  wall time and images left robust.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/channels_last.py --models resnet20_fp_at,resnet20_bireal_at \\
        --autoattack 32 --json docs/measurements/channels_last.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.attacks import Linf, get_attack
from arbibench.data import load_cifar10
from arbibench.files import atomic_write_json
from arbibench.models.zoo import load_model

LAYOUTS = {"nchw": False, "channels_last": True}


def step_seconds(model: nn.Module, x: torch.Tensor, y: torch.Tensor, reps: int) -> float:
    """Median wall time of one forward + backward pass to the input, as an attack step takes it."""
    times = []
    for i in range(reps + 2):
        xx = x.clone().requires_grad_(True)
        t0 = time.perf_counter()
        torch.autograd.grad(F.cross_entropy(model(xx), y), xx)
        if i >= 2:  # two warm-up passes
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def logits(model: nn.Module, x: torch.Tensor, batch: int = 500) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])


def autoattack_run(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    t0 = time.perf_counter()
    x_adv = get_attack("autoattack")(model, x, y, Linf(8 / 255), torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        robust = int((model(x_adv).argmax(1) == y).sum())
    return {"seconds": round(seconds, 1), "robust": robust}


def measure(name: str, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> dict[str, object]:
    models = {k: load_model(name, channels_last=v) for k, v in LAYOUTS.items()}
    xb, yb = x[: args.batch], y[: args.batch]
    steps = {k: round(step_seconds(m, xb, yb, args.reps), 4) for k, m in models.items()}
    a, b = logits(models["nchw"], x), logits(models["channels_last"], x)
    row: dict[str, object] = {
        "model": name, "step_seconds": steps, "speedup": round(steps["nchw"] / steps["channels_last"], 2),
        "images": len(x), "predictions_differ": int((a.argmax(1) != b.argmax(1)).sum()),
        "max_logit_difference": float((a - b).abs().max()),
    }
    if args.autoattack:
        keep = a.argmax(1) == y
        xa, ya = x[keep][: args.autoattack], y[keep][: args.autoattack]
        row["autoattack"] = {k: autoattack_run(m, xa, ya) for k, m in models.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet20_fp_at,resnet20_fp,resnet20_bireal_at")
    ap.add_argument("--n", type=int, default=10_000, help="test images for the agreement check")
    ap.add_argument("--batch", type=int, default=100, help="images per timed attack step")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--autoattack", type=int, default=0, help="correctly classified images for AutoAttack (0: skip)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    x, y, _ = load_cifar10(args.n, data_dir=args.data_dir)
    rows = [measure(m, x, y, args) for m in args.models.split(",")]
    print(f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, batch {args.batch}")
    print("| model | NCHW s/step | channels-last s/step | speed-up | predictions differ | max logit diff "
          "| AutoAttack |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        s = r["step_seconds"]
        aa = r.get("autoattack")
        aa_text = " / ".join(f"{k} {v['seconds']} s, {v['robust']} robust" for k, v in aa.items()) if aa else "-"
        print(f"| {r['model']} | {s['nchw']} | {s['channels_last']} | {r['speedup']}x | "
              f"{r['predictions_differ']} of {r['images']} | {r['max_logit_difference']:.2e} | {aa_text} |")
    if args.json:
        atomic_write_json({"threads": torch.get_num_threads(), "machine": platform.machine(), "batch": args.batch,
                           "models": rows}, args.json)


if __name__ == "__main__":
    main()
