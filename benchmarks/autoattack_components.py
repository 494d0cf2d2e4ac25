"""Where AutoAttack's time goes: each component of the standard version timed on its own, on a shipped model.

The full protocol's cost on the adversarially trained models is almost all AutoAttack (resnet20_fp_at's quick card:
2454 of 2976 seconds), where many images survive APGD-CE into APGD-T, FAB-T and Square. This runs the components
in the ensemble's order, each on the images every earlier one left correctly classified (as AutoAttack does), on the
first ``--n`` CIFAR-10 test images the model classifies correctly, and writes per component: images attacked,
seconds, seconds per image, images fooled.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_components.py --model resnet20_fp_at --n 64 \\
        --json docs/measurements/autoattack_components_resnet20_fp_at.json
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from arbibench.attacks import Linf, get_attack
from arbibench.attacks.autoattack import VERSIONS, component_generator
from arbibench.data import load_cifar10
from arbibench.files import atomic_write_json
from arbibench.machine import describe
from arbibench.models.zoo import load_model

EPS = 8 / 255


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet20_fp_at")
    ap.add_argument("--n", type=int, default=64, help="correctly classified test images to attack")
    ap.add_argument("--version", default="standard", choices=sorted(VERSIONS))
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the table as JSON here")
    args = ap.parse_args()

    model = load_model(args.model).eval()
    x, y, _ = load_cifar10(4 * args.n, data_dir=args.data_dir)
    with torch.no_grad():
        keep = model(x).argmax(1) == y
    x, y = x[keep][: args.n], y[keep][: args.n]
    threat = Linf(EPS)
    alive = torch.ones(len(y), dtype=torch.bool)
    rows = []
    for name in VERSIONS[args.version]:
        idx = alive.nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        attack = get_attack(name)
        t0 = time.perf_counter()
        x_adv = attack(model, x[idx], y[idx], threat, component_generator(0, name))
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            fooled = model(x_adv).argmax(1) != y[idx]
        alive[idx[fooled]] = False
        rows.append({"component": name, "images": int(idx.numel()), "seconds": round(seconds, 2),
                     "seconds_per_image": round(seconds / idx.numel(), 3), "fooled": int(fooled.sum())})
    total = sum(r["seconds"] for r in rows)
    print(f"{args.model}, AutoAttack {args.version}, {len(y)} correctly classified CIFAR-10 test images, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print("| component | images | seconds | s/image | fooled | share of time |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['component']} | {r['images']} | {r['seconds']:.1f} | {r['seconds_per_image']:.2f} | "
              f"{r['fooled']} | {100 * r['seconds'] / total:.0f}% |")
    print(f"robust after all components: {int(alive.sum())} of {len(y)}; {total:.1f} s in all")
    if args.json:
        atomic_write_json({"model": args.model, "version": args.version, "images": len(y),
                           "threads": torch.get_num_threads(), "machine": platform.machine(),
                           "cpu": describe(torch.get_num_threads()), "components": rows,
                           "robust": int(alive.sum()), "seconds": round(total, 2)}, args.json)


if __name__ == "__main__":
    main()
