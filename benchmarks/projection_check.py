"""The full-protocol projection checked against what the queue measured (issue 28).

BENCHMARKS.md projected the full ``cifar10`` protocol from one store batch of each attack on ``resnet20_bnn``
(20 images, one core, scaled to 200-image batches; section "The protocol on Ray"). The queue's full-protocol runs
store each batch's seconds, so for every model this prints, per evaluation, the batches stored, the measured
seconds per batch and the projected ones, and the totals in hours. A model whose run is not finished is compared on
its finished batches only (and says so). Batches a lent GPU computed (a seeded store) are done but left out of the
comparison, which is of CPU seconds: the table counts them in a column of their own.

    .venv/bin/python benchmarks/projection_check.py --models resnet20_fp,resnet20_fp_at \\
        --store runs/queue/full_protocol.db [--out docs/measurements/projection_check.json]

The measured seconds are the queue's: 2 threads, whatever else the machine did then (the queue runs alone; a paused
queue's wall time is excluded from nothing, so a batch that spanned a pause reads long).

Before a model's full run, ``--quick-cards model_info`` projects it from its quick card instead (each attack's
measured seconds there): white-box attacks scale with the images (500 -> 10,000); black-box attacks with the images
(100 -> 500) and, at most, with the query budget (1000 -> 5000: only images still unbroken at 1000 queries cost
more), so they get a range. The eps sweep and eps* are not in the cards' attack times and not projected.

    .venv/bin/python benchmarks/projection_check.py --models resnet20_fp,resnet20_fp_at --quick-cards model_info
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fused_forward import default_data_dir  # noqa: E402 - the benchmarks' one data-folder rule

from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.machine import cpu_model  # noqa: E402
from arbibench.operations.progress import protocol_progress  # noqa: E402
from arbibench.operations.projection import project_from_quick_card, quick_card_path  # noqa: E402
from arbibench.protocol.presets import get_protocol  # noqa: E402

# The projection under test: seconds per 200-image store batch, from BENCHMARKS.md ("Per-batch costs", resnet20_bnn,
# one core, full budgets). The sweep's apgd_ce batches are projected at apgd_ce's cost.
PROJECTED_S_PER_BATCH = {
    "clean": 0.4, "fgsm": 1.0, "pgd": 4.5, "mifgsm": 6.1, "cw_linf": 6.8, "apgd_ce": 2.9, "autoattack": 3.4,
    "transfer": 10.2, "square": 108.3, "simba": 786.2, "nes": 970.9, "hsja": 1418.9, "rays": 1486.4,
}


def project_from_quick_cards(models: list[str], folder: Path) -> list[dict[str, object]]:
    """Each model's full-protocol hours from its quick card (arbibench.operations.projection), printed and returned."""
    rows: list[dict[str, object]] = []
    print(f"{'model':<22} {'quick s':>8} {'white-box h':>12} {'black-box h':>14} {'total h':>14}")
    for name in models:
        path = quick_card_path(folder, name)
        if not path.is_file():
            raise SystemExit(f"no quick card of {name} at {path}")
        try:
            p = project_from_quick_card(json.loads(path.read_text()))
        except ValueError as e:
            raise SystemExit(f"{path}: {e}") from e
        (low, high), (t_low, t_high) = p.black_box_h, p.total_h
        print(f"{name:<22} {p.quick_seconds:>8.0f} {p.white_box_h:>12.2f} {low:>6.2f}-{high:<7.2f} "
              f"{t_low:>6.2f}-{t_high:<7.2f}")
        rows.append({"model": name, "quick_seconds": p.quick_seconds, "white_box_h": round(p.white_box_h, 3),
                     "black_box_h": [round(low, 3), round(high, 3)], "total_h": [round(t_low, 3), round(t_high, 3)]})
    return rows

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", required=True, help="comma-separated zoo names of the full-protocol run")
    parser.add_argument("--store", type=Path, help="the run's SQLite store")
    parser.add_argument("--quick-cards", type=Path, help="project from the quick cards in this model_info folder")
    parser.add_argument("--out", type=Path, help="also write the comparison as JSON here")
    args = parser.parse_args()
    if args.quick_cards is not None:
        rows = project_from_quick_cards(args.models.split(","), args.quick_cards)
        if args.out is not None:
            atomic_write_json({"cpu": cpu_model(), "quick_cards": str(args.quick_cards), "models": rows}, args.out)
            print(f"wrote {args.out}")
        return
    if args.store is None or not args.store.is_file():
        parser.error(f"no store at {args.store}; pass --store (a full run's store) or --quick-cards")
    protocol = get_protocol("cifar10")
    rows = []
    with ResultStore(args.store) as db:
        for name in args.models.split(","):
            p = protocol_progress(protocol, name, db, data_dir=default_data_dir())
            measured = projected = 0.0
            print(f"\n{name}: {p.done}/{p.batches} batches stored{'' if p.done == p.batches else ' (unfinished)'}")
            print(f"{'evaluation':<36} {'batches':>9} {'on GPU':>7} {'s/batch measured':>17} {'s/batch projected':>18} "
                  f"{'ratio':>7}")
            gpu = 0
            for e in p.evaluations:
                attack = e.label.rsplit(": ", 1)[1]
                proj = PROJECTED_S_PER_BATCH.get(attack)
                gpu += e.gpu_done
                measured += e.cpu_seconds
                projected += (proj or 0.0) * (e.done - e.gpu_done)
                per = e.per_batch  # a CPU's
                ratio = f"{per / proj:.2f}" if per is not None and proj else "-"
                print(f"{e.label:<36} {e.done:>4}/{e.batches:<4} {e.gpu_done:>7} "
                      f"{'-' if per is None else f'{per:.1f}':>17} {'-' if proj is None else f'{proj:.1f}':>18} "
                      f"{ratio:>7}")
            print(f"batches stored on a CPU: {measured / 3600:.2f} h measured, {projected / 3600:.2f} h projected "
                  f"({measured / projected:.2f}x)" if projected else "nothing stored on a CPU yet")
            rows.append({"model": name, "batches": p.batches, "done": p.done, "done_on_gpu": gpu,
                         "measured_h": round(measured / 3600, 3), "projected_h": round(projected / 3600, 3)})
    if args.out is not None:
        atomic_write_json({"cpu": cpu_model(), "store": str(args.store), "models": rows}, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
