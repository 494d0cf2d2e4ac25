"""Square Attack throughput, arbibench vs torchattacks 3.5.1, on the shipped resnet20_bnn and real CIFAR-10 (CPU).

Both libraries run Square (Linf 8/255, p_init 0.8, the same query budget) on the same images, one after the other in
one process. A query is one image in one forward pass of the model: each library gets its own counting wrapper
around the model, and every row of every forward pass made during the timed call is counted, including each
library's clean pass (torchattacks makes one inside ``Square``; arbibench's is made here, as its runner does).
The table gives ACC* (robust over all images: correct clean and after the attack), queries per second, images per
second and the mean number of queries per image.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/square_throughput.py --threads 1

Needs torchattacks (``make install`` puts it in the .venv without its dependencies; only the submodule used here is
imported, since ``import torchattacks`` needs scipy).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA, load_torchattacks  # noqa: E402

from arbibench.attacks import Linf, get_attack  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402

EPS = 8 / 255


class RowCounter(nn.Module):
    """Counts the images (rows) of every forward pass: one query each."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.inner(x)


def run_arbibench(model: nn.Module, queries: int) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    attack = get_attack("square", max_queries=queries, p_init=0.8)

    def run(x: torch.Tensor, y: torch.Tensor, batch: int) -> torch.Tensor:
        with torch.no_grad():
            correct = model(x).argmax(1) == y
        x_adv = x.clone()
        if bool(correct.any()):
            x_adv[correct] = attack(model, x[correct], y[correct], Linf(EPS), torch.Generator().manual_seed(batch))
        return x_adv

    return run


def run_torchattacks(model: nn.Module, queries: int) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    (square,) = load_torchattacks("attacks.square")
    attack = square.Square(model, norm="Linf", eps=EPS, n_queries=queries, p_init=0.8, seed=0)

    def run(x: torch.Tensor, y: torch.Tensor, batch: int) -> torch.Tensor:
        return attack(x, y)

    return run


def measure(
    scorer: nn.Module,
    counter: RowCounter,
    fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
) -> tuple[float, float, float, float, float]:
    """(ACC* %, queries/s, images/s, mean queries per image, seconds) over all batches."""
    robust, seconds, rows = 0, 0.0, 0
    for b, start in enumerate(range(0, len(y), batch_size)):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        counter.rows = 0
        t0 = time.perf_counter()
        x_adv = fn(xb, yb, b)
        seconds += time.perf_counter() - t0
        rows += counter.rows
        with torch.no_grad():
            robust += int(((scorer(xb).argmax(1) == yb) & (scorer(x_adv).argmax(1) == yb)).sum())
    return 100.0 * robust / len(y), rows / seconds, len(y) / seconds, rows / len(y), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="number of test images (the first n)")
    parser.add_argument("--queries", type=int, default=1000, help="query budget per image")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model("resnet20_bnn").eval()
    x, y, _ = load_cifar10(args.n, data_dir=args.data_dir)
    x = x.contiguous()
    with torch.no_grad():
        clean = 100.0 * float((model(x).argmax(1) == y).double().mean())
    print(
        f"# Square throughput: resnet20_bnn, first {args.n} CIFAR-10 test images, Linf 8/255, {args.queries} queries\n"
    )
    print(
        f"torch {torch.__version__}, {platform.machine()}, {args.threads} thread(s), batch size {args.batch_size}; "
        f"clean accuracy {clean:.1f}%\n"
    )
    print("| library | ACC* | queries/s | img/s | queries/img | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    results = {}
    for label, make in (("arbibench", run_arbibench), ("torchattacks", run_torchattacks)):
        counter = RowCounter(model).eval()
        acc, qps, ips, qpi, sec = measure(model, counter, make(counter, args.queries), x, y, args.batch_size)
        results[label] = (qps, ips)
        print(f"| {label} | {acc:.1f}% | {qps:.1f} | {ips:.2f} | {qpi:.1f} | {sec:.1f} |", flush=True)
    ratio_q = results["arbibench"][0] / results["torchattacks"][0]
    ratio_i = results["arbibench"][1] / results["torchattacks"][1]
    print(f"\nratio arbibench / torchattacks: {ratio_q:.2f}x queries/s, {ratio_i:.2f}x img/s")


if __name__ == "__main__":
    main()
