"""Whether median eps* separates the zoo's BNNs: the descent search with random corners on real CIFAR-10 images.

For each model, :func:`arbibench.evaluation.min_perturbation.minimal_perturbation` on the first ``-n`` CIFAR-10 test
images (Linf, the protocol's eps* settings: apgd_ce up to 16/255, floor 1e-3/255, 50 random corners per radius):
median eps* over the correctly classified images with its distribution-free 95% interval, the all-image median, the
share censored (fooled even at the floor), what found each image's example, and the seconds. Then, for every pair
of models, whether their intervals overlap (overlapping intervals do not separate the two).

    .venv/bin/python benchmarks/eps_star_resolution.py --threads 1 \\
        --out docs/measurements/eps_star_resolution.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import machine_info  # noqa: E402

from arbibench.data import load_cifar10  # noqa: E402
from arbibench.evaluation.cards import checkpoint_sha256  # noqa: E402
from arbibench.evaluation.min_perturbation import EPS_FLOOR, minimal_perturbation  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402

MODELS = "resnet20_bnn,resnet20_reactnet,resnet20_irnet,resnet20_fp"


def text(value: float | None, floor: float) -> str:
    """eps* in 1/255; ``<= floor`` for a censored statistic, ``inf`` for none found up to eps_max."""
    if value is None:
        return "inf"
    return f"<= {floor * 255:.3g}" if value <= floor else f"{value * 255:.3g}"


def measure(name: str, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, store: ResultStore,
            args: argparse.Namespace) -> dict[str, Any]:
    model = load_model(name, device="cpu")
    t0 = time.perf_counter()
    found = minimal_perturbation(
        model, x, y, idx, attacks=(args.attack,), eps_max=16 / 255, search_rounds=args.rounds, eps_floor=EPS_FLOOR,
        probe_draws=args.draws, store=store, dataset="cifar10", model_name=name, batch_size=args.batch_size,
        device="cpu",
    )
    seconds = time.perf_counter() - t0
    summary = found.to_dict()
    per_sample = summary.pop("per_sample")
    summary.pop("curve")
    return {
        "model": name,
        "checkpoint_sha256": checkpoint_sha256(name, "cifar10"),
        **summary,
        "found_by": dict(Counter(f for f in per_sample["found_by"] if f)),
        "seconds": round(seconds, 1),
        "per_sample": per_sample,
    }


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether the 95% intervals of the correct-image medians share a point (censored ends count as the floor,
    ``None``, not fooled up to eps_max, as infinity)."""
    (alo, ahi), (blo, bhi) = ([float("inf") if v is None else v for v in m["median_eps_star_correct_ci95"]]
                              for m in (a, b))
    return bool(alo <= bhi and blo <= ahi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--attack", default="apgd_ce")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--store", type=Path, default=Path("runs/eps_star_resolution.db"))
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x, y, idx = load_cifar10(args.n, data_dir=args.data_dir)
    args.store.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "command": " ".join(sys.argv), "machine": machine_info(args.threads), "n_images": args.n,
        "attack": args.attack, "search_rounds": args.rounds, "probe_draws": args.draws, "models": [],
    }
    print(f"# median eps* of {args.models} on the first {args.n} CIFAR-10 test images\n\n{result['machine']}\n")
    print("| model | correct | median eps*, correct images [95%] | all images [95%] | censored | found by | s |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    with ResultStore(args.store) as store:
        for name in args.models.split(","):
            row = measure(name, x, y, idx, store, args)
            result["models"].append(row)
            floor = row["eps_floor"]
            clo, chi = row["median_eps_star_correct_ci95"]
            lo, hi = row["median_eps_star_ci95"]
            print(f"| {name} | {row['n_correct']} | {text(row['median_eps_star_correct'], floor)} "
                  f"[{text(clo, floor)}, {text(chi, floor)}] | {text(row['median_eps_star'], floor)} "
                  f"[{text(lo, floor)}, {text(hi, floor)}] | {100 * (row['censored'] or 0):.0f}% | "
                  f"{', '.join(f'{k} {v}' for k, v in sorted(row['found_by'].items()))} | {row['seconds']:.0f} |",
                  flush=True)
            if args.out is not None:
                atomic_write_json(result, args.out)
    pairs = [
        {"a": a["model"], "b": b["model"], "intervals_overlap": overlaps(a, b)}
        for a, b in itertools.combinations(result["models"], 2)
    ]
    result["pairs"] = pairs
    print("\n| pair | 95% intervals of the correct-image medians |\n| --- | --- |")
    for p in pairs:
        print(f"| {p['a']} vs {p['b']} | {'overlap' if p['intervals_overlap'] else 'separate'} |")
    if args.out is not None:
        atomic_write_json(result, args.out)


if __name__ == "__main__":
    main()
