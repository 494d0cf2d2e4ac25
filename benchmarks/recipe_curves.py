"""Learning curves of short `--recipe long` runs that differ in one setting, compared on the held-out images.

Zoo v3 picks the long recipe's peak learning rate from measured curves, not by guesswork: the queue trains the same
model from the same shipped checkpoint for a few epochs at each candidate rate (`arbibench train --recipe long
--epochs N --lr X --out zoo_runs/curves/lr<X>`), and this script reads their run folders, prints each epoch's
accuracy on the 5,000 held-out training images side by side, and names the rate to use:

    .venv/bin/python benchmarks/recipe_curves.py zoo_runs/curves/lr*/resnet20_bireal \\
        --default-lr 5e-4 --out docs/measurements/recipe_curves_resnet20_bireal.json

Rule: the rate whose best held-out accuracy is highest, unless it beats the default's by less than two standard
errors of the difference between two accuracies on the same held-out images; then the default stays. Every run must
have the same model, start, schedule length and held-out split, or the comparison is refused.

What the comparison cannot say: short schedules favour small rates (a large rate first moves the weights away from
the checkpoint's optimum and is paid back late), and the shipped checkpoints trained on the held-out images, so their
held-out figures start optimistic and a large rate forgets that advantage first. Both biases point the same way: a
larger rate that wins here is likely to win by more over the full budget.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

# The recipe fields that must agree between the runs for their curves to be compared; lr is the one that varies.
SAME = ("arch", "method", "epochs", "init_from", "schedule", "val_examples", "seed", "batch_size", "teacher")


def read_run(folder: Path) -> dict[str, Any]:
    state_path = folder / "state.json"
    if not state_path.is_file():
        raise SystemExit(f"{folder} has no state.json: not a run folder of `arbibench train`")
    state = json.loads(state_path.read_text())
    recipe = state.get("recipe", {})
    if not recipe.get("val_examples"):
        raise SystemExit(f"{folder}: the run held out no images (val_examples is 0); curves need held-out accuracy")
    curve = [h["val_acc"] for h in state.get("history", []) if h.get("val_acc") is not None]
    return {
        "folder": str(folder),
        "lr": float(recipe["lr"]),
        "recipe": {k: recipe.get(k) for k in SAME},
        "epochs_run": len(state.get("history", [])),
        "init_val_acc": (state.get("validation") or {}).get("init_val_acc"),
        "val_acc": curve,
        "train_acc": [h.get("train_acc") for h in state.get("history", [])],
    }


def paired_se(a: float, b: float, n: int) -> float:
    """Standard error of the difference of two accuracies on the same n images, without the images' pairing (which
    only the run folders' predictions would give): an upper bound when the two runs agree on most images."""
    return math.sqrt((a * (1 - a) + b * (1 - b)) / n)


def pick(runs: list[dict[str, Any]], default_lr: float) -> dict[str, Any]:
    base = next((r for r in runs if math.isclose(r["lr"], default_lr)), None)
    if base is None:
        raise SystemExit(f"no run at the default rate {default_lr:g}; run it too, so the others have a reference")
    best = max(runs, key=lambda r: max(r["val_acc"]))
    a, b = max(best["val_acc"]), max(base["val_acc"])
    n = int(base["recipe"]["val_examples"])
    margin = 2 * paired_se(a, b, n)
    chosen = best if a - b > margin else base
    return {"lr": chosen["lr"], "best_val_acc": max(chosen["val_acc"]), "default_best_val_acc": b,
            "margin": round(margin, 4),
            "reason": (f"lr {best['lr']:g} beat the default {default_lr:g} by {100 * (a - b):.2f} points, more than "
                       f"2 standard errors ({100 * margin:.2f})" if chosen is best and best is not base else
                       f"no rate beat the default {default_lr:g} by more than 2 standard errors "
                       f"({100 * margin:.2f} points); the best was lr {best['lr']:g} at {100 * a:.2f}%")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of `arbibench train` (one per rate)")
    parser.add_argument("--default-lr", type=float, default=5e-4, help="the recipe's rate, kept unless beaten")
    parser.add_argument("--out", type=Path, help="also write the curves and the choice as JSON here")
    args = parser.parse_args()
    runs = sorted((read_run(f) for f in args.runs), key=lambda r: r["lr"])
    if len(runs) < 2:
        parser.error("give at least two run folders to compare")
    for r in runs[1:]:
        diff = {k: (runs[0]["recipe"][k], r["recipe"][k]) for k in SAME if runs[0]["recipe"][k] != r["recipe"][k]}
        if diff:
            raise SystemExit(f"{r['folder']} differs from {runs[0]['folder']} in more than the rate: {diff}")
    unfinished = [r["folder"] for r in runs if r["epochs_run"] < int(r["recipe"]["epochs"])]
    if unfinished:
        raise SystemExit(f"unfinished runs: {unfinished}; let their training finish before comparing")
    rec = runs[0]["recipe"]
    start = runs[0]["init_val_acc"]
    print(f"{rec['arch']}_{rec['method']}: {rec['epochs']} epochs from {rec['init_from']}, {rec['schedule']} schedule;"
          f" accuracy on the {rec['val_examples']:,} held-out training images"
          + (f" (at the start: {100 * start:.2f}%, optimistic)" if start is not None else ""))
    print("epoch " + " ".join(f"{'lr ' + format(r['lr'], 'g'):>11}" for r in runs))
    for e in range(max(len(r["val_acc"]) for r in runs)):
        cells = [f"{100 * r['val_acc'][e]:>10.2f}%" if e < len(r["val_acc"]) else f"{'-':>11}" for r in runs]
        print(f"{e + 1:>5} " + " ".join(cells))
    choice = pick(runs, args.default_lr)
    print(f"use lr {choice['lr']:g}: {choice['reason']}")
    if args.out is not None:
        from arbibench.files import atomic_write_json
        from arbibench.machine import cpu_model

        atomic_write_json({"cpu": cpu_model(), "rule": "highest best held-out accuracy, the default kept unless "
                           "beaten by more than 2 standard errors", "runs": runs, "choice": choice}, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
