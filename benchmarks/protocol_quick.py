"""``arbibench protocol run cifar10 --quick --models resnet20_bnn`` wall time before vs after issue 15, in one process.

Runs what the command runs for one model, twice, each into a fresh temporary store and model-info folder: the
quick cifar10 protocol (white-box attacks on the first 500 test images, black-box attacks with 1000 queries on 100
of them, eps* and the eps sweep) through :func:`arbibench.protocol.run.run_model`, then the model card with its
example images (:func:`arbibench.protocol.cards.write_protocol_card`), as the command's per-model callback
does. Timed: loading the images and the checkpoint, the protocol, the card.

- before: ``run_model(..., pool=False)`` on the reference model (the fused path refused, see
  ``before_after.py``), the query oracle calling the model with up to 256 images at once (64 after);
- after: today's defaults (``pool=True``, the fused path).

``--order`` picks which runs first (default: before, then after). Every stored row (per-image outcomes, queries,
perturbations, flags of every evaluation) must be the same in both stores: the script asserts it.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/protocol_quick.py --threads 2

The store batch size is the protocol's (200), so the 100 black-box images are one store batch and pooling has
nothing to pool here; ``--batch-size`` changes it (for both runs). Tiny check:
``--n-white 24 --n-black 12 --n-sweep 12 --queries 100 --batch-size 4``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import (  # noqa: E402
    Notes,
    assert_same_rows,
    before_chunking,
    check_fused,
    machine_info,
    reference_only,
)

from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402
from arbibench.protocol import BLACK_BOX, WHITE_BOX, AttackSpec, Protocol, get_protocol  # noqa: E402
from arbibench.protocol.cards import write_protocol_card  # noqa: E402
from arbibench.protocol.run import protocol_subsets, run_model  # noqa: E402


def shrunk(protocol: Protocol, args: argparse.Namespace) -> Protocol:
    """The quick protocol, with the sizes given on the command line (for a tiny check) replaced."""
    changes: dict[str, object] = {}
    if args.n_white is not None:
        changes["n_white_box"] = args.n_white
    if args.n_black is not None:
        changes["n_black_box"] = args.n_black
    if args.n_sweep is not None:
        changes["n_sweep"] = args.n_sweep
    if args.batch_size is not None:
        changes["batch_size"] = args.batch_size
    if args.queries is not None:
        changes["attacks"] = tuple(
            AttackSpec(a.name, a.family, tuple((k, args.queries if k == "max_queries" else v) for k, v in a.params))
            if a.family == BLACK_BOX
            else a
            for a in protocol.attacks
        )
    return replace(protocol, **changes) if changes else protocol


def run_once(
    when: str, protocol: Protocol, model_name: str, data_dir: Path, tmp: Path, notes: Notes
) -> tuple[float, Path, float, dict[str, float]]:
    """(wall seconds, store path, run_model's seconds, stored compute seconds per attack) of one protocol run."""
    store_path = tmp / f"{when}.sqlite"
    t0 = time.perf_counter()
    subsets = protocol_subsets(protocol, data_dir)
    model = load_model(model_name, dataset=protocol.dataset)
    if when == "before":
        model, _ = reference_only(model)
    else:
        check_fused(model)
    with ResultStore(store_path) as store, before_chunking(when == "before"):
        result = run_model(
            model,
            model_name,
            protocol,
            store,
            subsets,
            progress=False,
            console=notes.console,
            data_dir=data_dir,
            pool=when == "after",
        )
    write_protocol_card(result, tmp / f"model_info-{when}", model, data_dir=data_dir)
    seconds = time.perf_counter() - t0
    notes.flush()
    per_attack = {a.name: a.seconds for a in result.attacks}
    return seconds, store_path, result.seconds, per_attack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--model", default="resnet20_bnn")
    parser.add_argument("--order", choices=("before-after", "after-before"), default="before-after")
    parser.add_argument("--n-white", type=int, default=None, help="white-box images (default: the quick preset's)")
    parser.add_argument("--n-black", type=int, default=None, help="black-box images (default: the quick preset's)")
    parser.add_argument("--n-sweep", type=int, default=None, help="eps sweep images (default: the quick preset's)")
    parser.add_argument("--queries", type=int, default=None, help="black-box budget (default: the quick preset's)")
    parser.add_argument("--batch-size", type=int, default=None, help="store batch size (default: the preset's)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    protocol = shrunk(get_protocol("cifar10", quick=True), args)
    assert isinstance(protocol, Protocol)
    resized = any(v is not None for v in (args.n_white, args.n_black, args.n_sweep, args.queries, args.batch_size))

    budgets = ", ".join(f"{a.name} {a.kwargs['max_queries']}" for a in protocol.black_box if "max_queries" in a.kwargs)
    print(f"# protocol run {protocol.label} --models {args.model}: before vs after issue 15\n")
    print(machine_info(args.threads))
    print(
        f"white-box: {protocol.subset_text(WHITE_BOX)}; black-box: {protocol.subset_text(BLACK_BOX)}; sweep on "
        f"the first {protocol.n_sweep}; black-box budgets {budgets}"
        f"; store batch size {protocol.batch_size}{' (resized: not the quick protocol)' if resized else ''}"
    )
    print("before = run_model(pool=False) on the reference model (fused path refused); after = today's defaults\n")
    notes = Notes()
    results: dict[str, tuple[float, Path, float, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="arbibench-protocol-quick-") as tmp:
        for when in args.order.split("-"):
            results[when] = run_once(when, protocol, args.model, args.data_dir, Path(tmp), notes)
            print(f"{when}: {results[when][0]:.1f} s", flush=True)
        n_rows = assert_same_rows(results["before"][1], results["after"][1], "protocol run")
    print("\n| run | wall s | of which run_model s |")
    print("| --- | ---: | ---: |")
    for when in ("before", "after"):
        print(f"| {when} | {results[when][0]:.1f} | {results[when][2]:.1f} |")
    print(
        f"\nratio before / after: {results['before'][0] / results['after'][0]:.2f}x wall time; "
        f"{n_rows} stored rows identical (asserted)"
    )
    before, after = results["before"][3], results["after"][3]
    print("\nPer attack, the store's compute seconds (the rest of run_model: eps sweep, eps*, checks):\n")
    print("| attack | before s | after s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name in before:
        ratio = before[name] / after[name] if after[name] else float("nan")
        print(f"| {name} | {before[name]:.1f} | {after[name]:.1f} | {ratio:.2f}x |")
    for when, per in (("before", before), ("after", after)):
        attacks = sum(per.values())
        print(f"{when}: attacks {attacks:.1f} s, the rest of run_model {results[when][2] - attacks:.1f} s")


if __name__ == "__main__":
    main()
