"""AutoAttack (standard version), arbibench vs the reference implementation (PyPI ``pyautoattack`` 0.2.0, the
authors' code), on the shipped resnet20_bnn and real CIFAR-10 (CPU), in one process on the same images.

Linf eps 2/255 by default, where many images stay robust through APGD-CE, APGD-T and FAB-T and Square's 5000
queries on them dominate the time. Both run the standard version (APGD-CE 100 steps, APGD-T 9 targets x 100 steps,
FAB-T 9 targets, Square 5000 queries), seed 0, on the first ``--n`` test images (100), at the same torch thread
count:

- arbibench: :func:`arbibench.evaluation.runner.evaluate` with ``attacks=["autoattack"]`` (clean pass, the
  ensemble, verification, store commit into a temporary store; the gradient-masking checks off, ``--batch-size``
  images per store batch);
- reference: ``pyautoattack.AutoAttack(model, norm="Linf", eps=..., version="standard", seed=0, device="cpu")``
  and ``run_standard_evaluation(x, y, batch_size=--batch-size)`` (its own clean pass and model checks included).

ACC* is robust over all images (correct clean and after the attack; the reference's adversarial examples are
scored on the model here). Seconds are the wall time of each whole call.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_reference.py --threads 2

Tiny check: ``--n 8 --square-queries 100`` (changes both libraries' Square budget; no longer the standard version).
``pyautoattack`` is a benchmark-only dependency: ``make install`` puts it in the .venv with ``--no-deps`` (it
imports only torch and numpy).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import Notes, machine_info  # noqa: E402

from arbibench.attacks import Attack, Linf, get_attack, parse_eps  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.evaluation.runner import evaluate  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="number of test images (the first n)")
    parser.add_argument("--eps", default="2/255", help="Linf budget")
    parser.add_argument("--batch-size", type=int, default=100, help="images per batch in both libraries")
    parser.add_argument("--square-queries", type=int, default=None, help="Square's budget in both (default 5000)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--model", default="resnet20_bnn")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--verbose", action="store_true", help="the reference's log (per-attack robust accuracy)")
    return parser.parse_args()


def _ours(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, ensemble: Attack, eps: float,
          args: argparse.Namespace) -> tuple[float, float]:
    """arbibench's AutoAttack through the runner (a throwaway store): (ACC* in percent, seconds)."""
    notes = Notes()
    with tempfile.TemporaryDirectory(prefix="arbibench-autoattack-") as tmp, ResultStore(Path(tmp) / "s.db") as store:
        t0 = time.perf_counter()
        _, per, _, _ = evaluate(
            model,
            x,
            y,
            idx,
            attacks=[ensemble],
            threat=Linf(eps),
            dataset="cifar10",
            model_name=args.model,
            seed=0,
            batch_size=args.batch_size,
            store=store,
            progress=False,
            console=notes.console,
            checks=False,
        )
        seconds = time.perf_counter() - t0
    notes.flush()
    return 100.0 * float(per[ensemble.name].adv_correct.mean()), seconds


def main() -> None:
    args = _arguments()
    try:
        import pyautoattack
    except ImportError:
        raise SystemExit("pyautoattack is not installed: pip install --no-deps pyautoattack==0.2.0") from None
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="reference: %(message)s")
    torch.set_num_threads(args.threads)
    eps = parse_eps(args.eps)
    model = load_model(args.model).eval()
    x, y, idx = load_cifar10(args.n, data_dir=args.data_dir)
    x = x.contiguous()  # the reference's FAB calls .view on it
    with torch.no_grad():
        clean = 100.0 * float((model(x).argmax(1) == y).double().mean())

    ensemble = get_attack("autoattack")
    if args.square_queries is not None:  # a tiny check only: the config (and store key) says so
        assert ensemble.attacks[-1].name == "square", ensemble.components_run
        ensemble.attacks[-1] = get_attack("square", max_queries=args.square_queries)
    reference = pyautoattack.AutoAttack(model, norm="Linf", eps=eps, version="standard", seed=0, device="cpu")
    if args.square_queries is not None:
        reference.square.n_queries = args.square_queries

    print(
        f"# AutoAttack (standard), arbibench vs pyautoattack {pyautoattack.__version__}: {args.model}, first "
        f"{args.n} CIFAR-10 test images, Linf eps {args.eps}\n"
    )
    print(machine_info(args.threads))
    print(
        f"clean accuracy {clean:.1f}%; batch size {args.batch_size}; arbibench components: "
        f"{', '.join(ensemble.components_run)}; reference attacks: {', '.join(reference.attacks_to_run)}; "
        f"Square queries {reference.square.n_queries}\n"
    )

    ours_acc, ours_s = _ours(model, x, y, idx, ensemble, eps, args)

    t0 = time.perf_counter()
    x_adv, _ = reference.run_standard_evaluation(x, y, batch_size=args.batch_size)
    ref_s = time.perf_counter() - t0
    with torch.no_grad():
        robust = (model(x).argmax(1) == y) & (model(x_adv).argmax(1) == y)
    ref_acc = 100.0 * float(robust.double().mean())

    print("| implementation | ACC* | seconds |")
    print("| --- | ---: | ---: |")
    print(f"| arbibench | {ours_acc:.1f}% | {ours_s:.1f} |")
    print(f"| pyautoattack {pyautoattack.__version__} (reference) | {ref_acc:.1f}% | {ref_s:.1f} |")
    verdict = "equal or lower" if ours_acc <= ref_acc else "HIGHER"
    print(
        f"\nratio reference / arbibench wall time: {ref_s / ours_s:.2f}x; arbibench's ACC* is {verdict} "
        f"({ours_acc:.1f}% vs {ref_acc:.1f}%)"
    )


if __name__ == "__main__":
    main()
