"""Query attacks against the deployed BNN: queries per second of the C kernel, the torch emulator and the simulation.

Square, HopSkipJump and RayS at the quick cifar10 protocol's budget (1000 queries, Linf 8/255, seed 0) on the quick
protocol's black-box images (100 drawn with seed 0 from the first 500 CIFAR-10 test images), one model (default
``resnet20_bnn``), each run three ways through the runner (clean pass, attack, verification, store commits):

- ``simulation``: today's default, the fused float path answering the queries;
- ``deployed kernel``: ``--inference deployed`` with the C kernel (``arbibench.deploy``);
- ``deployed emulator``: the same with the pure-torch emulator, the kernel's oracle.

The kernel's and the emulator's stored rows (outcome, perturbation, queries of every image) must be identical: the
script asserts it. Queries per second = queries stored / wall time of the attack's evaluation.
``--protocol`` also times ``arbibench protocol run cifar10 --quick`` on the model with and without deployed inference
(each into a fresh store; about an hour each on one core).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/deployed_attacks.py --threads 1 --out runs/deployed_attacks.json

Tiny check: ``--n 8 --queries 50``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_forward import default_data_dir  # noqa: E402 - the benchmarks' one data-folder rule

from arbibench.attacks import get_attack, get_threat_model  # noqa: E402
from arbibench.deploy import deploy  # noqa: E402
from arbibench.deploy.build import load_library  # noqa: E402
from arbibench.deploy.threads import kernel_threads  # noqa: E402
from arbibench.evaluation.plan import plan_evaluation  # noqa: E402
from arbibench.evaluation.runner import execute  # noqa: E402
from arbibench.evaluation.settings import RunSettings  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.inference import Inference  # noqa: E402
from arbibench.machine import cpu_model  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402
from arbibench.protocol.presets import BLACK_BOX, get_protocol  # noqa: E402
from arbibench.protocol.run import protocol_subsets, run_protocol  # noqa: E402

ATTACKS = ("square", "hsja", "rays")
WAYS = ("simulation", "deployed kernel", "deployed emulator")


def stored_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT e.attack, o.sample_index, o.clean_correct, o.adv_correct, o.perturbation, o.queries "
            "FROM outcomes o JOIN evaluations e USING (eval_key) ORDER BY e.attack, o.sample_index"
        ).fetchall()


def run_way(way: str, model: torch.nn.Module, attack: str, kwargs: dict, x: torch.Tensor, y: torch.Tensor,
            idx: torch.Tensor, threat: object, store: Path, threads: int) -> tuple[float, int]:
    """(seconds, queries) of one attack's evaluation, the clean pass included."""
    with ResultStore(store) as db:
        inference = "simulation" if way == "simulation" else "deployed"
        plan = plan_evaluation(model, x, y, idx, attacks=[get_attack(attack, **kwargs)], threat=threat,
                               settings=RunSettings(dataset="cifar10", inference=Inference.parse(inference)),
                               model_name="bench", store=db)
        if way != "simulation":
            backend = "kernel" if way == "deployed kernel" else "emulator"
            plan.ctx.oracle = deploy(model, backend=backend, threads=threads)
        t0 = time.perf_counter()
        run = execute(plan, progress=False, checks=False)
        seconds = time.perf_counter() - t0
    queries = run.outcomes[attack].queries
    return seconds, int(queries[queries >= 0].sum()) if queries is not None else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch and kernel threads")
    parser.add_argument("--model", default="resnet20_bnn")
    parser.add_argument("--n", type=int, default=None, help="only the first n black-box images")
    parser.add_argument("--queries", type=int, default=None, help="query budget (default: the quick protocol's)")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--protocol", action="store_true", help="also time the whole quick protocol, both ways")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: $ARBIBENCH_DATA, ../shared/data, cache")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data_dir = args.data_dir or default_data_dir()

    protocol = get_protocol("cifar10", quick=True)
    specs = {s.name: s for s in protocol.black_box}
    x, y, idx = protocol_subsets(protocol, data_dir)[BLACK_BOX]
    if args.n is not None:
        x, y, idx = x[: args.n], y[: args.n], idx[: args.n]
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    model = load_model(args.model)
    results: dict = {"cpu": cpu_model(), "threads": args.threads, "model": args.model, "images": len(y),
                     "torch": torch.__version__, "kernel_threads": kernel_threads(load_library()), "attacks": {}}
    print(f"{args.model} on {len(y)} images, {args.threads} thread(s), {results['cpu']}")
    print(f"{'attack':8} {'way':18} {'seconds':>8} {'queries':>8} {'q/s':>8} {'vs simulation':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for attack in args.attacks.split(","):
            kwargs = dict(specs[attack].kwargs)
            if args.queries is not None:
                kwargs["max_queries"] = args.queries
            rows, per_way = {}, {}
            for way in WAYS:
                store = Path(tmp) / f"{attack}-{way.replace(' ', '_')}.db"
                seconds, queries = run_way(way, model, attack, kwargs, x, y, idx, threat, store, args.threads)
                per_way[way] = {"seconds": round(seconds, 3), "queries": queries,
                                "queries_per_s": round(queries / seconds, 1)}
                rows[way] = stored_rows(store)
            if rows["deployed kernel"] != rows["deployed emulator"]:
                sys.exit(f"{attack}: the kernel's stored rows differ from the emulator's; the kernel is wrong")
            base = per_way["simulation"]["queries_per_s"]
            for way, r in per_way.items():
                r["vs_simulation"] = round(r["queries_per_s"] / base, 2) if base else None
                print(f"{attack:8} {way:18} {r['seconds']:8.1f} {r['queries']:8d} {r['queries_per_s']:8.1f} "
                      f"{r['vs_simulation']:>13}x")
            results["attacks"][attack] = per_way
        if args.protocol:
            results["protocol_quick"] = {}
            for inference in ("simulation", "deployed"):
                with ResultStore(Path(tmp) / f"protocol-{inference}.db") as db:
                    t0 = time.perf_counter()
                    run_protocol(protocol, [args.model], db, data_dir=data_dir, progress=False, inference=inference)
                    results["protocol_quick"][inference] = round(time.perf_counter() - t0, 1)
                print(f"protocol cifar10 --quick, {inference}: {results['protocol_quick'][inference]:.0f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
