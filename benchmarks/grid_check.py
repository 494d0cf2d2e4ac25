"""The 8-bit threat model against float inputs, on the shipped resnet20_bnn and its FP twin and real CIFAR-10 images.

For each model, :func:`arbibench.protocol.grid_check.run_grid_check` on the first ``-n`` test images: APGD-CE (100
steps) at Linf 1, 2, 4 and 8/255 in float and on the uint8 grid, ACC* of each with Wilson 95% intervals, the paired
difference grid - float (bootstrap over images), and the share of float adversarial examples that still fool once
rounded to 8 bits. The same numbers as ``arbibench protocol grid-check --json``, plus the machine and the seconds.

    .venv/bin/python benchmarks/grid_check.py --threads 1 -n 300 --out docs/measurements/grid_check.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack_throughput import DEFAULT_DATA  # noqa: E402
from before_after import machine_info  # noqa: E402

from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.protocol.grid_check import GRID_ATTACK, GRID_EPS, run_grid_check  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet20_bnn,resnet20_fp")
    parser.add_argument("-n", type=int, default=500, help="the first N CIFAR-10 test images")
    parser.add_argument("--attack", default=GRID_ATTACK)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checks = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        check = run_grid_check(name, n_examples=args.n, attack=args.attack, eps_values=GRID_EPS,
                               batch_size=args.batch_size, data_dir=args.data_dir)
        seconds = time.perf_counter() - t0
        checks.append({**check.to_dict(), "wall_seconds": round(seconds, 1)})
        print(f"{name}: clean {100 * check.clean_acc.value:.1f}% ({seconds:.0f} s)")
        for r in check.rows:
            survival = "-" if r.survival is None else f"{r.survived}/{r.float_fooled} = {100 * r.survival.value:.1f}%"
            print(f"  {r.eps_text}: ACC* float {100 * r.acc_float.value:.1f}%, uint8 {100 * r.acc_grid.value:.1f}% "
                  f"(grid attack alone {100 * r.acc_grid_attack.value:.1f}%), grid - float "
                  f"{100 * r.difference.value:+.1f} [{100 * r.difference.low:+.1f}, {100 * r.difference.high:+.1f}], "
                  f"float examples surviving rounding {survival}")
    if args.out is not None:
        record = {"kind": "grid_check", "date": time.strftime("%Y-%m-%d"), "machine": machine_info(args.threads),
                  "command": " ".join(["benchmarks/grid_check.py", *sys.argv[1:]]), "checks": checks}
        print(f"wrote {atomic_write_json(record, args.out)}")


if __name__ == "__main__":
    main()
