"""The certified lower end of eps* on zoo models: ``arbibench.certify`` on real CIFAR-10 test images.

Per model, the first ``--n`` test images: the certified Linf radius by bisection between ``--radius-min`` and
``--radius-max`` (``--steps`` bisections, ``--nodes`` branch-and-bound nodes per radius, ``--corners`` random sign
corners tried first), the smallest radius at which a counterexample was found and replayed, the seconds, and the
counts verified / falsified / unknown at each radius tried. One thread, so that the seconds read alike.

    .venv/bin/python benchmarks/verify_radius.py --models resnet20_bnn,resnet20_reactnet --n 20 \\
        --out docs/measurements/verify_radius.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fused_forward import default_data_dir  # noqa: E402 - the benchmarks' one data-folder rule

from arbibench.attacks.threat import parse_eps  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.machine import describe  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402
from arbibench.verify import certify  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet20_bnn,resnet20_reactnet")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--radius-min", default="1e-4/255")
    parser.add_argument("--radius-max", default="1e-2/255")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--corners", type=int, default=50)
    parser.add_argument("--semantics", default="deployed")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y, idx = load_cifar10(args.n, data_dir=default_data_dir())
    rows = []
    for name in args.models.split(","):
        model = load_model(name)
        start = time.perf_counter()
        result = certify(model, x, y, radius_min=parse_eps(args.radius_min), radius_max=parse_eps(args.radius_max),
                         steps=args.steps, max_nodes=args.nodes, corners=args.corners, semantics=args.semantics,
                         indices=idx, on_image=lambda c, name=name: print(
                             f"{name} #{c.index}: certified {c.certified * 255:.3g}/255, attacked "
                             f"{c.attacked * 255:.3g}/255, {c.seconds:.1f} s", flush=True))
        seconds = time.perf_counter() - start
        by_radius: dict[float, Counter[str]] = {}
        for c in result.images:
            for v in c.verdicts:
                by_radius.setdefault(v.radius, Counter())[v.status] += 1
        lower, upper = result.median_bracket()
        print(f"{name}: median bracket [{lower * 255:.3g}, {upper * 255:.3g}]/255 over {len(result.correct)} correct "
              f"images, {seconds:.0f} s")
        rows.append({"model": name, "seconds": round(seconds, 1),
                     "by_radius": [{"radius_per_255": r * 255, **dict(cnt)} for r, cnt in sorted(by_radius.items())],
                     **result.to_dict()})
    record = {"machine": describe(1), "command": " ".join(["benchmarks/verify_radius.py", *sys.argv[1:]]),
              "images": f"CIFAR-10 test images 0..{args.n - 1}", "models": rows}
    if args.out is not None:
        atomic_write_json(record, args.out)


if __name__ == "__main__":
    main()
