"""Black-box attacks before vs after issue 15 (fused path, pooled batches), on the quick protocol's settings.

For Square, SimBA, NES, HopSkipJump and RayS, each at the quick cifar10 protocol's budget (1000 queries, Linf 8/255,
seed 0) on the quick protocol's black-box images (the 100 images drawn with seed 0 from the first 500 CIFAR-10 test
images, as ``arbibench protocol run cifar10 --quick`` attacks them), ``resnet20_bnn``:

- before: the runner with ``pool=False`` on the reference model (see ``before_after.py``: the fused path refused),
  the oracle calling the model with up to 256 images at once (64 after);
- after: today's default, ``pool=True`` with the fused path.

Both run through :func:`arbibench.evaluation.runner.evaluate` (clean pass, attack, verification, commits; no model
checks), each into its own temporary store, in one process; the order alternates from attack to attack (before
first for the 1st, 3rd, 5th attack, after first for the others). The stored rows (outcome, perturbation, queries of
every image) must be identical: the script asserts it. Wall time includes the clean pass and the store writes.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/query_attacks.py --threads 2

Store batch size: the protocol's (200) by default, so the quick protocol's 100 images are one store batch and
pooling has nothing to pool; ``--batch-size 25`` shows what pooling adds when a run has several store batches.
Tiny check: ``--n 12 --queries 100 --batch-size 4``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import (  # noqa: E402
    BEFORE_QUERY_CHUNK,
    Notes,
    assert_same_rows,
    before_chunking,
    check_fused,
    machine_info,
    reference_only,
    warm_up,
)

from arbibench.attacks import get_attack, get_threat_model, query  # noqa: E402
from arbibench.evaluation.runner import evaluate  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402
from arbibench.protocol.presets import BLACK_BOX, get_protocol  # noqa: E402
from arbibench.protocol.run import protocol_subsets  # noqa: E402

ATTACKS = ("square", "simba", "nes", "hsja", "rays")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--n", type=int, default=None, help="only the first n of the quick black-box images")
    parser.add_argument("--queries", type=int, default=None, help="query budget (default: the quick protocol's)")
    parser.add_argument("--batch-size", type=int, default=None, help="store batch size (default: the protocol's)")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--model", default="resnet20_bnn")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    protocol = get_protocol("cifar10", quick=True)
    specs = {s.name: s for s in protocol.black_box}
    x, y, idx = protocol_subsets(protocol, args.data_dir)[BLACK_BOX]
    if args.n is not None:
        x, y, idx = x[: args.n], y[: args.n], idx[: args.n]
    batch_size = args.batch_size or protocol.batch_size
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    model = load_model(args.model).eval()
    check_fused(model)
    before_model, refused = reference_only(model)
    notes = Notes()
    warm_up(model, x)

    print(f"# Black-box attacks before vs after issue 15: {args.model}, protocol {protocol.label}\n")
    print(machine_info(args.threads))
    print(
        f"{len(y)} images ({protocol.subset_text(BLACK_BOX)}{'' if args.n is None else f', the first {args.n}'}), "
        f"{protocol.threat_model} eps {protocol.eps_text}, seed {protocol.seed}, store batch size {batch_size}; "
        "before = unpooled runner + reference model, after = pooled runner + fused path"
    )
    print(f"before: {refused}; up to {BEFORE_QUERY_CHUNK} images per model call (after: {query.QUERY_CHUNK})\n")
    print("| attack | ACC* | seconds before | seconds after | ratio | queries |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    total = {"before": 0.0, "after": 0.0}
    with tempfile.TemporaryDirectory(prefix="arbibench-query-attacks-") as tmp:
        for i, name in enumerate(args.attacks.split(",")):
            params = specs[name].kwargs
            if args.queries is not None:
                params["max_queries"] = args.queries
            seconds, stores, acc, queries = {}, {}, 0.0, 0
            for when in ("before", "after") if i % 2 == 0 else ("after", "before"):
                stores[when] = Path(tmp) / f"{name}-{when}.sqlite"
                with ResultStore(stores[when]) as store, before_chunking(when == "before"):
                    t0 = time.perf_counter()
                    _, per, _, _ = evaluate(
                        before_model if when == "before" else model,
                        x,
                        y,
                        idx,
                        attacks=[get_attack(name, **params)],
                        threat=threat,
                        dataset=protocol.dataset,
                        model_name=args.model,
                        seed=protocol.seed,
                        batch_size=batch_size,
                        store=store,
                        progress=False,
                        console=notes.console,
                        checks=False,
                        pool=when == "after",
                    )
                    seconds[when] = time.perf_counter() - t0
                notes.flush()
                out = per[name]
                acc = 100.0 * float(out.adv_correct.mean())
                queries = int(out.queries[out.clean_correct].sum())
            assert_same_rows(stores["before"], stores["after"], name)
            total["before"] += seconds["before"]
            total["after"] += seconds["after"]
            print(
                f"| {name} ({params['max_queries']} queries) | {acc:.1f}% | {seconds['before']:.1f} | "
                f"{seconds['after']:.1f} | {seconds['before'] / seconds['after']:.2f}x | {queries} |",
                flush=True,
            )
    print(
        f"| all | | {total['before']:.1f} | {total['after']:.1f} | {total['before'] / total['after']:.2f}x | |\n\n"
        "queries: the oracle's count summed over the attacked images (queries at success for the fooled ones); "
        "stored rows identical before and after for every attack (asserted)"
    )


if __name__ == "__main__":
    main()
