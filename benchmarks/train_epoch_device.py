"""Seconds per training epoch of zoo models on a device, each alone and all side by side (``train --models``).

The measurement behind BENCHMARKS.md's GPU training figures: the papers' recipes (``--recipe paper``) cut to a few
epochs, the full 45,000 training images and 5,000 held-out ones, the first epoch left out as warm-up (data copy,
cuDNN autotuning, compilation). Alone, each model runs in this process; side by side, one ``arbibench train
--models`` call runs them all at once and the wall time of the group is what a zoo costs.

    python benchmarks/train_epoch_device.py --device cuda --models resnet20_fp,resnet20_bnn --epochs 4 \
        --side-by-side --out docs/measurements/train_epoch_h100.json

On the CPU, ``--train-examples 512 --epochs 2`` checks the script in a minute. ``--synthetic`` times random images
of CIFAR-10's shapes instead (a BNN's epoch costs the same on any pixels): a lent GPU machine measures while the real
data is still on its way in chunks (``benchmarks/gpu/stage_cifar10.py``); its accuracies mean nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import torch

from arbibench.machine import describe
from arbibench.train import default_recipe, train
from arbibench.train.execution import Execution
from arbibench.train.side_by_side import COMMAND_LINE


def _recipe(name: str, epochs: int, train_examples: int | None) -> Any:
    arch, _, method = name.partition("_")
    r = replace(default_recipe(method, kind="paper", arch=arch), epochs=epochs, train_examples=train_examples)
    if r.step1_epochs:
        r.step1_epochs = max(1, epochs // 2)
    return r


def synthetic_cifar10(folder: Path, seed: int = 0) -> Path:
    """Random uint8 images and labels in CIFAR-10's files and shapes under ``folder/cifar10``; returns ``folder``."""
    rng = np.random.default_rng(seed)
    (folder / "cifar10").mkdir(parents=True, exist_ok=True)
    for name in [f"train_{i}" for i in range(5)] + ["test"]:
        np.savez(folder / "cifar10" / f"{name}.npz", x=rng.integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8),
                 y=rng.integers(0, 10, 10_000, dtype=np.int64))
    return folder


def _steady(epoch_seconds: list[dict[str, Any]]) -> float:
    """The median epoch after the first (warm-up: data copy, autotuning, compilation)."""
    rest = [e["seconds"] for e in epoch_seconds[1:]] or [e["seconds"] for e in epoch_seconds]
    return float(median(rest))


def alone(names: list[str], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ex = Execution(device=args.device, compile_model=args.compile, compile_mode=args.compile_mode,
                   autocast=args.autocast)
    for name in names:
        summary = train(_recipe(name, args.epochs, args.train_examples), work / "alone" / name, args.data_dir,
                        log=lambda m: None, eval_examples=args.eval_examples, execution=ex)
        out[name] = {"seconds_per_epoch": _steady(summary["epoch_seconds"]),
                     "epoch_seconds": [e["seconds"] for e in summary["epoch_seconds"]]}
        print(f"{name} alone: {out[name]['seconds_per_epoch']:.2f} s an epoch", flush=True)
    return out


def side_by_side(names: list[str], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-c", COMMAND_LINE, "train", "--models", ",".join(names),
           "--recipe", "paper", "--epochs", str(args.epochs), "--device", args.device, "--out", str(work / "group")]
    cmd += ["--compile", "--compile-mode", args.compile_mode] if args.compile else []
    cmd += ["--autocast", args.autocast] if args.autocast else []
    cmd += ["--data-dir", str(args.data_dir)] if args.data_dir else []
    if args.train_examples is not None:
        raise SystemExit("--side-by-side runs the real command, which trains on every training image: drop "
                         "--train-examples")
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - start
    per_model = {}
    for name in names:
        state = json.loads((work / "group" / name / "state.json").read_text())
        per_model[name] = {"seconds_per_epoch": _steady(state["epoch_seconds"]),
                           "epoch_seconds": [e["seconds"] for e in state["epoch_seconds"]]}
    print(f"side by side: {wall:.1f} s for {len(names)} models x {args.epochs} epochs", flush=True)
    return {"wall_seconds": round(wall, 1), "models": per_model}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="resnet20_fp,resnet20_bnn,resnet20_reactnet")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--train-examples", type=int, default=None, help="first N training images (CPU checks)")
    p.add_argument("--eval-examples", type=int, default=1000, help="test images measured at the end")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--autocast", default=None)
    p.add_argument("--side-by-side", action="store_true", help="also run all models at once with train --models")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--synthetic", action="store_true",
                   help="time random images of CIFAR-10's shapes (timings only: the accuracies mean nothing)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.synthetic and args.data_dir is not None:
        raise SystemExit("--synthetic makes its own images: drop --data-dir")
    names = [n for n in args.models.split(",") if n]
    work = Path(tempfile.mkdtemp(prefix="arbibench-epochs-"))
    try:
        if args.synthetic:
            args.data_dir = synthetic_cifar10(work / "data")
        result: dict[str, Any] = {
            "machine": describe(torch.get_num_threads()),
            "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
            "torch": torch.__version__, "epochs": args.epochs, "train_examples": args.train_examples or 45_000,
            "compile": args.compile_mode if args.compile else None, "autocast": args.autocast,
            "images": "synthetic (random pixels and labels)" if args.synthetic else "CIFAR-10",
            "alone": alone(names, args, work),
        }
        if args.side_by_side:
            result["side_by_side"] = side_by_side(names, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
