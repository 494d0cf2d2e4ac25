"""Fused inference path vs reference model on the whole CIFAR-10 test set, for every shipped binary zoo model.

The test suite checks 300 images per model (logits equal bit for bit); this script checks all 10,000 (about 8
minutes on a 2-core CPU) and exits non-zero on any difference:

    .venv/bin/python benchmarks/fused_agreement.py [--threads 2] [--models resnet20_bnn,...]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from arbibench.data import load_cifar10
from arbibench.models.zoo import ZOO, load_model
from arbibench.nn.fused import fuse


def _logits(model: torch.nn.Module, x: torch.Tensor, batch: int = 1000) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + batch]) for i in range(0, len(x), batch)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(n for n, e in ZOO.items() if e.shipped and e.method != "fp"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x, _, _ = load_cifar10(None)
    failed = 0
    print(f"{'model':<22} {'images':>7} {'prediction differences':>23} {'max |logit difference|':>23} {'s':>6}")
    for name in args.models.split(","):
        t0 = time.perf_counter()
        model = load_model(name)
        ref, got = _logits(model, x), _logits(fuse(model), x)
        flips = int((ref.argmax(1) != got.argmax(1)).sum())
        diff = float((ref - got).abs().max())
        failed += flips > 0 or diff > 0
        print(f"{name:<22} {len(x):>7} {flips:>23} {diff:>23.3g} {time.perf_counter() - t0:>6.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
