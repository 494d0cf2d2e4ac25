"""Training-step and attack-gradient throughput of BNNs: the fused sign functions against the unfused chain.

"before" runs every sign quantizer through the chain ``sign(x) + (s(x) - s(x).detach())`` (the reference path,
``arbibench.nn.reference_surrogates``) with Adam's per-tensor loop; "after" is the shipped path: one fused
autograd.Function per surrogate family and Adam's multi-tensor (``foreach``) step. Both run in the same process on
the same real CIFAR-10 images, in alternating rounds so that background load hits both alike; the table gives the
median images/s of the rounds and the ratio.

    .venv/bin/python benchmarks/train_throughput.py --threads 2 --rounds 5
    .venv/bin/python benchmarks/train_throughput.py --layouts --compile  # the long recipe's step: NCHW,
                                                                        # channels_last, torch.compile

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
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.files import atomic_write_json
from arbibench.machine import cpu_model
from arbibench.models.zoo import load_model
from arbibench.nn import reference_surrogates, set_training_progress
from arbibench.train import augment
from arbibench.train.loop import distillation_loss, latent_binary_weights

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


def _recipe_steps(net: torch.nn.Module, teacher: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                  steps: int, bf16: bool = False) -> float:
    """Images/s of ``steps`` steps of the long recipe's step: student and teacher forward, distillation loss,
    backward, Adam, latent weights clamped (one untimed warm-up step first). ``bf16``: the forwards and the loss
    under bfloat16 autocast, as ``arbibench train --autocast bf16`` runs them."""
    latent = latent_binary_weights(net)
    for i in range(steps + 1):
        if i == 1:
            t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            with torch.no_grad():
                teacher_logits = teacher(x)
            loss = distillation_loss(net(x), teacher_logits)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_clamp_min_(latent, -1.0)
            torch._foreach_clamp_max_(latent, 1.0)
    return steps * len(x) / (time.perf_counter() - t0)


def _compare_layouts(
    x: torch.Tensor, steps: int, rounds: int, with_compile: bool, models: tuple[str, ...] = MODELS,
    with_bf16: bool = False, only: tuple[str, ...] = (),
) -> list[tuple[str, str, float]]:
    """The long recipe's training step of each BNN in NCHW, in channels_last and (optionally) under torch.compile
    and under bf16 autocast, in alternating rounds; returns (model, variant, median img/s) rows. Compile time is
    printed apart; ``only`` keeps the named variants (and NCHW). ``compile_student`` compiles the student alone,
    ``compile`` the teacher too (what ``arbibench train --compile`` runs); ``bf16`` is NCHW under ``--autocast
    bf16``, ``compile_bf16`` both flags."""
    rows = []
    for name in models:
        teacher = load_model("resnet20_fp").requires_grad_(False)
        variants: dict[str, tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer, torch.Tensor]] = {}
        for variant in ("nchw", "channels_last", *(("compile_student", "compile") if with_compile else ()),
                        *(("bf16",) if with_bf16 else ()), *(("compile_bf16",) if with_bf16 and with_compile else ())):
            if only and variant not in only and variant != "nchw":  # NCHW stays: the ratios are against it
                continue
            net = load_model(name).train()
            set_training_progress(net, 0.5)
            t, xi = teacher, x
            if variant == "channels_last":
                net = net.to(memory_format=torch.channels_last)
                t = load_model("resnet20_fp").requires_grad_(False).to(memory_format=torch.channels_last)
                xi = x.contiguous(memory_format=torch.channels_last)
            opt = torch.optim.Adam(net.parameters(), lr=1e-5, foreach=True)
            if variant.startswith("compile"):  # "compile": the student and the teacher, as `train --compile` does
                compiled = torch.compile(net)
                t = (teacher if variant == "compile_student"
                     else torch.compile(load_model("resnet20_fp").requires_grad_(False)))
                t0 = time.perf_counter()
                _recipe_steps(compiled, t, opt, xi, 1, bf16=variant.endswith("bf16"))  # compiles forward and backward
                print(f"{name}: torch.compile + 2 steps took {time.perf_counter() - t0:.1f} s", flush=True)
                net = compiled
            variants[variant] = (net, t, opt, xi)
        rates: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(rounds):
            for v, (net, t, opt, xi) in variants.items():
                rates[v].append(_recipe_steps(net, t, opt, xi, steps, bf16=v.endswith("bf16")))
        for v, r in rates.items():
            rows.append((name, v, statistics.median(r)))
            print(f"{name} {v}: {statistics.median(r):.1f} img/s (rounds: {', '.join(f'{a:.1f}' for a in r)})",
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="alternating before/after rounds per measurement")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--layouts", action="store_true",
                        help="only the long recipe's step: NCHW vs channels_last (and torch.compile with --compile)")
    parser.add_argument("--compile", action="store_true",
                        help="with --layouts: add the torch.compile variants (the student alone; student and teacher)")
    parser.add_argument("--bf16", action="store_true",
                        help="with --layouts: add NCHW under bfloat16 autocast (train --autocast bf16), and with "
                        "--compile also compiled under it")
    parser.add_argument("--variants", default="",
                        help="with --layouts: comma-separated variants to keep (NCHW always runs), e.g. bf16,compile")
    parser.add_argument("--out", type=Path, help="with --layouts: also write the rows and the machine as JSON here")
    parser.add_argument("--models", default=",".join(MODELS), help="with --layouts: comma-separated zoo BNNs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    x_train, y_train = read_cifar10_arrays("train", args.data_dir)
    gen = torch.Generator().manual_seed(0)
    x = augment(torch.from_numpy(x_train[: args.batch_size]), gen).float().div_(255)
    y = torch.from_numpy(y_train[: args.batch_size])
    if args.layouts:
        layout_rows = _compare_layouts(x, args.steps, args.rounds, args.compile, tuple(args.models.split(",")),
                                       args.bf16, tuple(v for v in args.variants.split(",") if v))
        print(f"\n{cpu_model()}, torch {torch.__version__}, {args.threads} threads, "
              f"batch {args.batch_size}, median of {args.rounds} alternating rounds of {args.steps} steps\n")
        print("| model | variant | img/s | vs NCHW |\n| --- | --- | ---: | ---: |")
        base = {m: r for m, v, r in layout_rows if v == "nchw"}
        for m, v, r in layout_rows:
            print(f"| `{m}` | {v} | {r:.1f} | {r / base[m]:.2f}x |")
        if args.out is not None:
            atomic_write_json({
                "command": "benchmarks/train_throughput.py " + " ".join(sys.argv[1:]),
                "cpu": cpu_model(), "torch": torch.__version__,
                "threads": args.threads, "batch_size": args.batch_size, "rounds": args.rounds, "steps": args.steps,
                "rows": [{"model": m, "variant": v, "img_per_s": round(r, 1), "vs_nchw": round(r / base[m], 3)}
                         for m, v, r in layout_rows],
            }, args.out)
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
