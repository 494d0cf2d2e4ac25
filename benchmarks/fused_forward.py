"""Forward time of every zoo BNN: fused path vs reference model vs the FP twin, in one interleaved run.

    .venv/bin/python benchmarks/fused_forward.py --threads 1 --rounds 3

Single-image and batch-200 forwards of real CIFAR-10 test images, no grad; the median of ``--rounds`` rounds, each
round timing FP, reference and fused back to back so that a shared machine's noise hits all three alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from arbibench.data import load_cifar10
from arbibench.models.zoo import ZOO, load_model
from arbibench.nn.fused import fuse

# The real data folder beside the repository, as the other benchmarks use; $ARBIBENCH_DATA wins over it.
REPO_RELATIVE_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def default_data_dir() -> Path | None:
    """``$ARBIBENCH_DATA``, else ``../shared/data`` when present, else None (the loader's cache folder)."""
    if env := os.environ.get("ARBIBENCH_DATA"):
        return Path(env)
    return REPO_RELATIVE_DATA if REPO_RELATIVE_DATA.is_dir() else None


def _ms(model: torch.nn.Module, x: torch.Tensor, reps: int) -> float:
    with torch.no_grad():
        model(x)
        t0 = time.perf_counter()
        for _ in range(reps):
            model(x)
    return (time.perf_counter() - t0) / reps * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        help="folder holding cifar10/; default $ARBIBENCH_DATA, else ../shared/data, else the cache",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    x, _, _ = load_cifar10(200, data_dir=args.data_dir)
    fp = load_model("resnet20_fp")
    print("| model | batch | FP twin ms | reference ms | fused ms | reference / fused | fused / FP |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, entry in ZOO.items():
        if not entry.shipped or entry.method == "fp":
            continue
        ref = load_model(name)
        fused = fuse(ref)
        for batch, reps in ((1, 50), (200, 2)):
            xb = x[:batch]
            rows = [(_ms(fp, xb, reps), _ms(ref, xb, reps), _ms(fused, xb, reps)) for _ in range(args.rounds)]
            f, r, u = (statistics.median(c) for c in zip(*rows, strict=True))
            print(f"| `{name}` | {batch} | {f:.2f} | {r:.2f} | {u:.2f} | {r / u:.2f}x | {u / f:.2f}x |")


if __name__ == "__main__":
    main()
