"""Deployed (bit-packed) inference vs the float paths: every binary convolution of ResNet-20, then whole models.

    .venv/bin/python benchmarks/deployed_forward.py --rounds 5 --out runs/deployed_forward.json

Part 1, one thread: each binary convolution shape of the CIFAR ResNet-20 (18 convolutions, 5 shapes) at batch 1
and 64, the packed kernel (packing included, every instruction set this CPU runs, and the best one on 2 threads)
vs torch's float32 convolution of the same shape on one thread (what the fused path computes). Part 2: the
whole-model forward of every shipped zoo BNN on real CIFAR-10 test images at batch 1 and 64, 1 and 2 threads: the
deployed model on the C kernel vs the same deployed model on the torch emulator vs today's fused float path
(``arbibench.nn.fused``) vs the full-precision twin. Each round times every variant back to back (a shared
machine's noise hits all alike); the median of ``--rounds`` rounds is reported. The kernel's and the emulator's
logits are checked equal before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F
from fused_forward import default_data_dir

from arbibench.data import load_cifar10
from arbibench.deploy import deploy
from arbibench.deploy.build import KernelUnavailableError, load_library
from arbibench.deploy.kernel import kernel_conv, resolve_isa
from arbibench.deploy.semantics import BinaryConvSpec
from arbibench.deploy.threads import kernel_threads
from arbibench.machine import cpu_model
from arbibench.models.methods import get_method
from arbibench.models.zoo import ZOO, load_model
from arbibench.nn.fused import fuse

# (in channels, out channels, input size, stride, how many of ResNet-20's 18 binary convolutions have this shape)
RESNET20_BINARY_CONVS = ((16, 16, 32, 1, 6), (16, 32, 32, 2, 1), (32, 32, 16, 1, 5), (32, 64, 16, 2, 1),
                         (64, 64, 8, 1, 5))


def ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm: caches, lazily packed weights
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1000


def isas() -> list[str]:
    found = []
    for isa in ("avx512", "avx2", "scalar"):
        try:
            found.append(resolve_isa(isa))
        except KernelUnavailableError:
            pass
    return found


def bench_convs(rounds: int) -> list[dict]:
    torch.set_num_threads(1)
    rows = []
    g = torch.Generator().manual_seed(0)
    for c, o, size, stride, count in RESNET20_BINARY_CONVS:
        signs = torch.randint(0, 2, (o, c, 3, 3), generator=g).float().mul_(2).sub_(1)
        spec = BinaryConvSpec(signs, torch.rand(o, generator=g), torch.randn(o, generator=g), (stride, stride),
                              (1, 1))
        weight = torch.randn(o, c, 3, 3, generator=g)
        for batch in (1, 64):
            x = torch.randn(batch, c, size, size, generator=g)
            half = (x >= 0).float().sub_(0.5)  # the fused path's binarized input
            reps = 200 if batch == 1 else 10
            variants: dict[str, Callable[[], object]] = {
                "torch_float32": lambda half=half, weight=weight, stride=stride: F.conv2d(half, weight, None, stride, 1)
            }
            for isa in isas():
                variants[f"kernel_{isa}"] = lambda isa=isa, x=x, spec=spec: kernel_conv(x, spec, 1, isa)
            # the kernel's own two threads, no torch operation in between (torch's OpenMP workers idle)
            variants["kernel_2threads"] = lambda x=x, spec=spec: kernel_conv(x, spec, 2, "auto")
            times = {k: statistics.median(ms(f, reps) for _ in range(rounds)) for k, f in variants.items()}
            row = {"in": c, "out": o, "size": size, "stride": stride, "convs_in_resnet20": count, "batch": batch,
                   "ms": times, "speedup": {k: times["torch_float32"] / v for k, v in times.items()
                                            if k != "torch_float32"}}
            rows.append(row)
            ratio = " ".join(f"{k.removeprefix('kernel_')} {v:.2f}x" for k, v in row["speedup"].items())
            print(f"| {c}->{o} {size}x{size} s{stride} (x{count}) | {batch} | {times['torch_float32']:.3f} | "
                  + " | ".join(f"{times[k]:.3f}" for k in variants if k != "torch_float32") + f" | {ratio} |")
    return rows


def bench_models(names: list[str], rounds: int, data_dir: Path | None) -> list[dict]:
    x, _, _ = load_cifar10(64, data_dir=data_dir)
    fp = load_model("resnet20_fp")
    rows = []
    for name in names:
        ref = load_model(name)
        fused = fuse(ref)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            kernel = deploy(ref, backend="kernel", threads=threads)
            emulator = deploy(ref, backend="emulator")
            with torch.no_grad():
                if not torch.equal(kernel(x), emulator(x)):
                    raise SystemExit(f"{name}: kernel and emulator logits differ; not timing a wrong kernel")
            for batch in (1, 64):
                xb = x[:batch]
                reps = 30 if batch == 1 else 3
                variants = {"fp_twin": fp, "fused": fused, "emulator": emulator, "kernel": kernel}

                def run(m: torch.nn.Module, xb: torch.Tensor = xb) -> object:
                    with torch.no_grad():
                        return m(xb)

                samples: dict[str, list[float]] = {k: [] for k in variants}
                for _ in range(rounds):
                    for k, m in variants.items():
                        samples[k].append(ms(lambda m=m: run(m), reps))  # type: ignore[misc]
                t = {k: statistics.median(v) for k, v in samples.items()}
                row = {"model": name, "threads": threads, "batch": batch, "ms": t, "backend": kernel.backend,
                       "fused_over_kernel": t["fused"] / t["kernel"],
                       "emulator_over_kernel": t["emulator"] / t["kernel"],
                       "fp_over_kernel": t["fp_twin"] / t["kernel"]}
                rows.append(row)
                print(f"| `{name}` | {threads} | {batch} | {t['fp_twin']:.2f} | {t['fused']:.2f} | "
                      f"{t['emulator']:.2f} | {t['kernel']:.2f} | {row['fused_over_kernel']:.2f}x | "
                      f"{row['emulator_over_kernel']:.2f}x | {row['fp_over_kernel']:.2f}x |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--models", default=",".join(n for n, e in ZOO.items()
                                                 if e.shipped and get_method(e.method).is_binary
                                                 and e.training == "standard"))
    p.add_argument("--out", type=Path, required=True, help="where the JSON results are written")
    p.add_argument("--data-dir", type=Path, default=default_data_dir())
    args = p.parse_args()
    started = datetime.now(timezone.utc)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}; kernel ISAs: {', '.join(isas())}; "
          f"kernel threads: {kernel_threads(load_library())}")
    print("\n| binary conv | batch | torch float32 ms | " + " | ".join(f"{i} ms" for i in isas())
          + " | auto, 2 threads ms | speedup over torch |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in isas()) + " | ---: | --- |")
    convs = bench_convs(args.rounds)
    print("\n| model | threads | batch | FP twin ms | fused ms | emulator ms | kernel ms | fused / kernel | "
          "emulator / kernel | FP / kernel |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    models = bench_models(args.models.split(","), args.rounds, args.data_dir)
    result = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "isas": isas(),
              "kernel_threads": kernel_threads(load_library()), "started": started.isoformat(timespec="seconds"),
              "rounds": args.rounds, "convs": convs,
              "models": models}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, args.out)  # atomic
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
