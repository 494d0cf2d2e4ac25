"""Attack throughput, arbibench vs torchattacks, on the shipped resnet20_bnn and real CIFAR-10 test images (CPU).

Times PGD-20 (Linf 8/255, step 2/255, random start), APGD-CE (100 steps) and the AutoAttack ensemble (standard
version) in both libraries on the same images, batch by batch, and prints a markdown table of ACC* (robust over all
images: correct clean and after the attack) and images per second. arbibench attacks only the correctly classified
images of each batch, as its runner does; torchattacks is handed every image, as its users do.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/attack_throughput.py --n 1000

Needs torchattacks (``make install`` puts it in the .venv, without its dependencies: only the submodules used here
are imported, since ``import torchattacks`` needs scipy).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import platform
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from arbibench.attacks import Linf, get_attack
from arbibench.data import load_cifar10
from arbibench.models.zoo import load_model

EPS = 8 / 255
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_torchattacks(*submodules: str) -> list[ModuleType]:
    """``torchattacks.<submodule>`` modules, importable even where ``import torchattacks`` fails for want of scipy."""
    if "torchattacks" not in sys.modules:
        spec = importlib.util.find_spec("torchattacks")
        if spec is None:
            raise SystemExit("torchattacks is not installed: pip install --no-deps torchattacks==3.5.1")
        try:
            import torchattacks  # noqa: F401
        except ImportError:
            package = types.ModuleType("torchattacks")
            package.__spec__ = spec
            package.__path__ = list(spec.submodule_search_locations or [])
            sys.modules["torchattacks"] = package
    return [importlib.import_module(f"torchattacks.{name}") for name in submodules]


AttackFn = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def arbibench_fn(model: nn.Module, name: str, **params: object) -> AttackFn:
    attack = get_attack(name, **params)
    threat = Linf(EPS)

    def run(x: torch.Tensor, y: torch.Tensor, batch: int) -> torch.Tensor:
        with torch.no_grad():
            correct = model(x).argmax(1) == y
        x_adv = x.clone()
        if bool(correct.any()):
            x_adv[correct] = attack(model, x[correct], y[correct], threat, torch.Generator().manual_seed(batch))
        return x_adv

    return run


def torchattacks_fn(make: Callable[[], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]) -> AttackFn:
    attack = make()

    def run(x: torch.Tensor, y: torch.Tensor, batch: int) -> torch.Tensor:
        torch.manual_seed(batch)  # torchattacks' PGD draws its random start from the global generator
        return attack(x, y)

    return run


def measure(model: nn.Module, fn: AttackFn, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(ACC* in percent over all images, images per second)."""
    robust = 0
    seconds = 0.0
    for b, start in enumerate(range(0, len(y), batch_size)):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        t0 = time.perf_counter()
        x_adv = fn(xb, yb, b)
        seconds += time.perf_counter() - t0
        with torch.no_grad():
            robust += int(((model(xb).argmax(1) == yb) & (model(x_adv).argmax(1) == yb)).sum())
    return 100.0 * robust / len(y), len(y) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="number of test images (the first n)")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--skip-autoattack", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pgd, apgd, autoattack = load_torchattacks("attacks.pgd", "attacks.apgd", "attacks.autoattack")
    model = load_model("resnet20_bnn").eval()
    x, y, _ = load_cifar10(args.n, data_dir=args.data_dir)
    x = x.contiguous()  # an NCHW view of NHWC storage; torchattacks' FAB calls .view on it and needs contiguous
    with torch.no_grad():
        clean = 100.0 * float((model(x).argmax(1) == y).double().mean())

    ensemble = get_attack("autoattack")
    rows: list[tuple[str, AttackFn, AttackFn]] = [
        (
            "PGD-20",
            arbibench_fn(model, "pgd", steps=20, rel_stepsize=0.25, random_start=True),
            torchattacks_fn(lambda: pgd.PGD(model, eps=EPS, alpha=2 / 255, steps=20, random_start=True)),
        ),
        (
            "APGD-CE-100",
            arbibench_fn(model, "apgd_ce", steps=100),
            torchattacks_fn(lambda: apgd.APGD(model, norm="Linf", eps=EPS, steps=100, loss="ce", seed=0)),
        ),
    ]
    if not args.skip_autoattack:
        rows.append(
            (
                "AutoAttack (standard)",
                arbibench_fn(model, "autoattack"),
                torchattacks_fn(
                    lambda: autoattack.AutoAttack(model, norm="Linf", eps=EPS, version="standard", n_classes=10, seed=0)
                ),
            )
        )

    print(f"# Attack throughput: resnet20_bnn, first {args.n} CIFAR-10 test images, Linf eps 8/255\n")
    print(
        f"torch {torch.__version__}, {platform.machine()}, {args.threads} thread(s), batch size {args.batch_size}; "
        f"clean accuracy {clean:.1f}%; arbibench autoattack components run: {', '.join(ensemble.components_run)} "
        f"(skipped: {', '.join(ensemble.skipped_components) or 'none'})\n"
    )
    print("| attack | ACC* arbibench | ACC* torchattacks | img/s arbibench | img/s torchattacks | speed-up |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, ours, theirs in rows:
        acc_ours, rate_ours = measure(model, ours, x, y, args.batch_size)
        acc_theirs, rate_theirs = measure(model, theirs, x, y, args.batch_size)
        print(
            f"| {label} | {acc_ours:.1f}% | {acc_theirs:.1f}% | {rate_ours:.1f} | {rate_theirs:.1f} | "
            f"{rate_ours / rate_theirs:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
