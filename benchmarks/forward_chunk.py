"""Cost per image of a forward (and of an attack's gradient pass) against the number of images per call, on CPU.

The query oracle splits every request into chunks of ``arbibench.attacks.query.QUERY_CHUNK`` images on a CPU, and the
white-box attacks run whole store batches at once. On a CPU the cost per image is not flat in the batch size: once
a layer's activations outgrow the caches, a larger batch costs more per image. This script measures it, so that the
chunk size is a measured choice: milliseconds per image of the fused path (what the oracle queries) and of
the reference model's forward + backward (what a gradient attack pays), for each chunk size, median of
``--rounds`` rounds over the same ``--images`` real CIFAR-10 test images.

    .venv/bin/python benchmarks/forward_chunk.py --threads 1
    .venv/bin/python benchmarks/forward_chunk.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import machine_info  # noqa: E402

from arbibench.data import load_cifar10  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402
from arbibench.nn.fused import fused_path  # noqa: E402


def ms_per_image(step, x: torch.Tensor, chunk: int, rounds: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for part in torch.split(x, chunk):
            step(part)
        times.append((time.perf_counter() - t0) * 1000 / len(x))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", default="resnet20_bnn,resnet20_reactnet,resnet20_fp")
    parser.add_argument("--chunks", default="16,32,64,128,256")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    chunks = [int(c) for c in args.chunks.split(",")]
    x, _, _ = load_cifar10(args.images, data_dir=args.data_dir)

    print(f"# Cost per image against images per call ({args.images} CIFAR-10 test images, median of {args.rounds})\n")
    print(machine_info(args.threads) + "\n")
    print("| model | pass | " + " | ".join(f"{c}" for c in chunks) + " | best |")
    print("| --- | --- | " + " | ".join("---:" for _ in chunks) + " | ---: |")
    for name in args.models.split(","):
        model = load_model(name).eval()
        fused = fused_path(model)[0]

        def forward(part: torch.Tensor, fused=fused) -> None:  # type: ignore[no-untyped-def]
            with torch.no_grad():
                fused(part)

        def gradient(part: torch.Tensor, model=model) -> None:  # type: ignore[no-untyped-def]
            xi = part.clone().requires_grad_(True)
            torch.autograd.grad(model(xi).logsumexp(1).sum(), xi)

        for label, step in (("forward (fused path)", forward), ("forward + input gradient", gradient)):
            step(x[:2])  # the first call's setup stays out of the timings
            cost = {c: ms_per_image(step, x, c, args.rounds) for c in chunks}
            best = min(cost, key=cost.__getitem__)
            cells = " | ".join(f"{cost[c]:.2f}" for c in chunks)
            print(f"| `{name}` | {label} | {cells} | {best} |", flush=True)
    print("\nms per image; columns: images per call")


if __name__ == "__main__":
    main()
