"""Square Attack throughput on the shipped resnet20_bnn and real CIFAR-10 (CPU): arbibench today vs arbibench before
issue 15 vs torchattacks 3.5.1, in one process on the same images.

Square at Linf 8/255, p_init 0.8, the same query budget and seed 0 everywhere, on the first ``--n`` test images:

- arbibench today: the runner (:func:`arbibench.evaluation.runner.evaluate`: clean pass, attack, verification and
  store commits; no model checks) with its defaults, pooled black-box batches and the fused path, at store
  batch size ``--batch-size`` (default 50, i.e. 4 store batches of 200 images: pooling runs the still-robust images
  of several store batches in one forward batch of about the store batch size, so with one store batch of 200 it
  would have nothing to pool);
- arbibench before, same batches: the runner with ``pool=False`` on the reference model (the fused path refused,
  see ``before_after.py``; the oracle calling the model with up to 256 images at once, 64 today) at the same store
  batch size; its stored rows must equal today's (asserted);
- arbibench before, batch 200 (``--before-batch-size``, 0 to skip): the same at the runner's default store batch
  size, one store batch of 200 images, the setting the issue describes: the fair baseline for pooling, whose gain
  is to keep the forward batches of small store batches as full as those of one large batch. Other store batches
  draw other seeds, so its rows differ (not compared);
- torchattacks: ``torchattacks.Square(model, norm='Linf', eps=8/255, n_queries=..., p_init=0.8, seed=0)`` called on
  batches of ``--torchattacks-batch-size`` images, the whole batch handed over as its users do.

A query is one image in one forward pass asked for by the attack. arbibench: one clean query per image plus the
queries its oracle charged (stored per image: queries at success for the fooled images, queries spent for the
others); padding rows and the reference model's confirmations are not counted. torchattacks: every row of every
forward pass during the timed call (a row counter around the model), including its own clean pass and its final pass.
ACC* is robust over all images (correct clean and after the attack). Each timing is the wall time of the whole call.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/square_throughput.py --threads 2

(the issue's size, the defaults: 200 images, 5000 queries). Tiny check:
``--n 16 --queries 150 --batch-size 4 --before-batch-size 16 --torchattacks-batch-size 16``.

Needs torchattacks (``make install`` puts it in the .venv without its dependencies; only the submodule used here is
imported, since ``import torchattacks`` needs scipy).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA, load_torchattacks  # noqa: E402
from before_after import (  # noqa: E402
    Notes,
    assert_same_rows,
    before_chunking,
    check_fused,
    machine_info,
    reference_only,
    warm_up,
)

from arbibench.attacks import Linf, get_attack  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.evaluation.runner import evaluate  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402

EPS = 8 / 255
P_INIT = 0.8


class RowCounter(nn.Module):
    """Counts the images (rows) of every forward pass: one query each."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.inner(x)


# (ACC* %, queries, seconds)
Result = tuple[float, int, float]


def run_runner(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    queries: int,
    batch_size: int,
    pool: bool,
    store_path: Path,
    notes: Notes,
) -> Result:
    attack = get_attack("square", max_queries=queries, p_init=P_INIT)
    with ResultStore(store_path) as store, before_chunking(not pool):
        t0 = time.perf_counter()
        _, per, _, _ = evaluate(
            model,
            x,
            y,
            attacks=[attack],
            threat=Linf(EPS),
            dataset="cifar10",
            model_name="resnet20_bnn",
            seed=0,
            batch_size=batch_size,
            store=store,
            progress=False,
            console=notes.console,
            checks=False,
            pool=pool,
        )
        seconds = time.perf_counter() - t0
    notes.flush()
    out = per["square"]
    spent = len(y) + int(out.queries[out.clean_correct].sum())  # the clean pass, then the attack's queries
    return 100.0 * float(out.adv_correct.mean()), spent, seconds


def run_torchattacks(model: nn.Module, x: torch.Tensor, y: torch.Tensor, queries: int, batch_size: int) -> Result:
    (square,) = load_torchattacks("attacks.square")
    counter = RowCounter(model).eval()
    attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = square.Square(
        counter, norm="Linf", eps=EPS, n_queries=queries, p_init=P_INIT, seed=0
    )
    robust, seconds = 0, 0.0
    for start in range(0, len(y), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        t0 = time.perf_counter()
        x_adv = attack(xb, yb)
        seconds += time.perf_counter() - t0
        with torch.no_grad():
            robust += int(((model(xb).argmax(1) == yb) & (model(x_adv).argmax(1) == yb)).sum())
    return 100.0 * robust / len(y), counter.rows, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="number of test images (the first n)")
    parser.add_argument("--queries", type=int, default=5000, help="query budget per image")
    parser.add_argument("--batch-size", type=int, default=50, help="arbibench's store batch size (before and today)")
    parser.add_argument(
        "--before-batch-size",
        type=int,
        default=200,
        help="also run 'before' (unpooled, reference) at this store batch size; 0: skip",
    )
    parser.add_argument("--torchattacks-batch-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model("resnet20_bnn").eval()
    x, y, _ = load_cifar10(args.n, data_dir=args.data_dir)
    x = x.contiguous()
    check_fused(model)
    before_model, refused = reference_only(model)
    warm_up(model, x)
    notes = Notes()
    with torch.no_grad():
        clean = 100.0 * float((model(x).argmax(1) == y).double().mean())
    print(
        f"# Square throughput: resnet20_bnn, first {args.n} CIFAR-10 test images, Linf 8/255, {args.queries} queries\n"
    )
    print(machine_info(args.threads))
    print(
        f"clean accuracy {clean:.1f}%; arbibench store batch size {args.batch_size}, torchattacks batch size "
        f"{args.torchattacks_batch_size}"
    )
    print(f"before: {refused}\n")
    print("| library | ACC* | queries/s | img/s | queries/img | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    results: dict[str, Result] = {}

    def row(label: str, result: Result) -> None:
        results[label] = result
        acc, spent, sec = result
        print(
            f"| {label} | {acc:.1f}% | {spent / sec:.1f} | {len(y) / sec:.2f} | {spent / len(y):.1f} | {sec:.1f} |",
            flush=True,
        )

    today = f"arbibench today (pooled, fused; batch {args.batch_size})"
    before = f"arbibench before (unpooled, reference; batch {args.batch_size})"
    with tempfile.TemporaryDirectory(prefix="arbibench-square-") as tmp:
        stores = {label: Path(tmp) / f"{i}.sqlite" for i, label in enumerate((today, before))}
        row(today, run_runner(model, x, y, args.queries, args.batch_size, True, stores[today], notes))
        row(before, run_runner(before_model, x, y, args.queries, args.batch_size, False, stores[before], notes))
        assert_same_rows(stores[before], stores[today], "square")
        if args.before_batch_size:
            label = f"arbibench before (unpooled, reference; batch {args.before_batch_size})"
            row(
                label,
                run_runner(
                    before_model, x, y, args.queries, args.before_batch_size, False, Path(tmp) / "extra.sqlite", notes
                ),
            )
    row("torchattacks 3.5.1", run_torchattacks(model, x, y, args.queries, args.torchattacks_batch_size))

    def qps(label: str) -> float:
        return results[label][1] / results[label][2]

    print(f"\nstored rows of today's and before's runs (batch {args.batch_size}) identical (asserted)")
    for label in results:
        if label != today:
            print(
                f"ratio today / {label}: {qps(today) / qps(label):.2f}x queries/s, "
                f"{results[label][2] / results[today][2]:.2f}x wall time"
            )


if __name__ == "__main__":
    main()
