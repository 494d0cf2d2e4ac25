"""Training-step and attack-gradient throughput of BNNs: the fused sign functions against the unfused chain.

"before" runs every sign quantizer through the chain ``sign(x) + (s(x) - s(x).detach())`` (the reference path,
``arbibench.nn.reference_surrogates``) with Adam's per-tensor loop; "after" is the shipped path: one fused
autograd.Function per surrogate family and Adam's multi-tensor (``foreach``) step. Both run in the same process on
the same real CIFAR-10 images, in alternating rounds so that background load hits both alike; the table gives the
median images/s of the rounds and the ratio.

    .venv/bin/python benchmarks/train_throughput.py --threads 2 --rounds 5
    .venv/bin/python benchmarks/train_throughput.py --compile     # eager vs torch.compile, resnet20_bnn

Measured:
- training step: forward + cross-entropy + backward + Adam step, model in train mode, batch 128 of augmented images
  (IR-Net's EDE mid-schedule, so its temperature is the training one);
- attack gradient pass: forward + backward to the input only, eval mode, batch 128 (what PGD/APGD do per step).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.models.zoo import load_model
from arbibench.nn import reference_surrogates, set_training_progress
from arbibench.train import augment

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MODELS = ("resnet20_bnn", "resnet20_irnet", "resnet20_reactnet")


def _train_steps(name: str, x: torch.Tensor, y: torch.Tensor, steps: int, fused: bool) -> float:
    """Images per second of ``steps`` training steps (after one untimed warm-up step)."""
    model = load_model(name).train()
    set_training_progress(model, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=fused)
    with contextlib.nullcontext() if fused else reference_surrogates():
        for i in range(steps + 1):
            if i == 1:
                t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return steps * len(y) / (time.perf_counter() - t0)


def _gradient_passes(name: str, x: torch.Tensor, y: torch.Tensor, steps: int, fused: bool) -> float:
    model = load_model(name).requires_grad_(False)
    with contextlib.nullcontext() if fused else reference_surrogates():
        for i in range(steps + 1):
            if i == 1:
                t0 = time.perf_counter()
            xi = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(model(xi), y), xi)
    return steps * len(y) / (time.perf_counter() - t0)


def _compare_compile(x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """Training-step images/s of resnet20_bnn, eager and under torch.compile (compile time reported apart)."""
    model = load_model("resnet20_bnn").train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    for _ in range(2):  # the first calls compile the forward and the backward graph
        loss = F.cross_entropy(compiled(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"compile + 2 steps: {time.perf_counter() - t0:.1f} s")
    for label, net in (("eager", model), ("compiled", compiled), ("eager", model), ("compiled", compiled)):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        print(f"{label}: {steps * len(y) / (time.perf_counter() - t0):.1f} img/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="alternating before/after rounds per measurement")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--compile", action="store_true", help="only compare eager and torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    x_train, y_train = read_cifar10_arrays("train", args.data_dir)
    gen = torch.Generator().manual_seed(0)
    x = augment(torch.from_numpy(x_train[: args.batch_size]), gen).float().div_(255)
    y = torch.from_numpy(y_train[: args.batch_size])
    if args.compile:
        _compare_compile(x, y, args.steps * 2)
        return

    rows = []
    for name in MODELS:
        for label, fn in (("training step", _train_steps), ("attack gradient pass", _gradient_passes)):
            rates: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for fused in (False, True):
                    rates[fused].append(fn(name, x, y, args.steps, fused))
            before, after = statistics.median(rates[False]), statistics.median(rates[True])
            rows.append((name, label, before, after))
            print(f"{name} {label}: {before:.1f} -> {after:.1f} img/s ({after / before:.2f}x)", flush=True)

    print()
    print(
        f"{platform.machine()} CPU, torch {torch.__version__}, {args.threads} threads, batch {args.batch_size}, "
        f"median of {args.rounds} alternating rounds of {args.steps} steps"
    )
    print()
    print("| model | pass | img/s before (chain) | img/s after (fused) | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, label, before, after in rows:
        print(f"| `{name}` | {label} | {before:.1f} | {after:.1f} | {after / before:.2f}x |")


if __name__ == "__main__":
    main()
