"""White-box attack steps through ``torch.compile``: how much faster, and how far from the model itself.

AutoAttack's APGD-T and FAB-T on the adversarially trained BNNs are most of the full protocol's queue hours, and a
BNN's eager forward pays for chains of small elementwise kernels around every sign (RSign, RPReLU, the surrogate
gradients) that a compiler fuses. This measures, per model, what a compiled gradient path would buy and cost:

- seconds per forward + backward pass to the input (an attack step) at ``--batch`` and at a ragged smaller batch
  (the images still standing), eager vs ``torch.compile(dynamic=True)``, median of ``--reps``;
- compile time of the first graph and of the second batch size;
- on the first ``--n`` CIFAR-10 test images: predictions that differ, the largest logit difference (a sign that
  round-off moves across zero flips in a BNN), and the cosine similarity of the input gradients.

Nothing in arbibench uses compiled gradients yet: a compiled BNN is not the model bit for bit, so a run with it
would need its own store keys. This file is the measurement such a change starts from.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/compiled_gradients.py \\
        --models resnet20_bireal_at,resnet20_reactnet_at,resnet20_reactnet,resnet20_fp_at \\
        --json docs/measurements/compiled_gradients.json
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from channels_last import step_seconds  # noqa: E402 - the attack step, timed as the layout benchmark times it

from arbibench.data import load_cifar10  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402


def first_call_seconds(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Wall time of one forward + backward pass: for a compiled model at a new shape, mostly compilation."""
    xx = x.clone().requires_grad_(True)
    t0 = time.perf_counter()
    torch.autograd.grad(F.cross_entropy(model(xx), y), xx)
    return time.perf_counter() - t0


def agreement(eager: nn.Module, compiled: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int) -> dict[str, float]:
    """Predictions that differ, largest logit difference and the smallest cosine of the input gradients."""
    differ, max_diff, cosines = 0, 0.0, []
    for i in range(0, len(x), batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        grads, logits = [], []
        for m in (eager, compiled):
            xx = xb.clone().requires_grad_(True)
            out = m(xx)
            grads.append(torch.autograd.grad(F.cross_entropy(out, yb, reduction="sum"), xx)[0].flatten(1))
            logits.append(out.detach())
        differ += int((logits[0].argmax(1) != logits[1].argmax(1)).sum())
        max_diff = max(max_diff, float((logits[0] - logits[1]).abs().max()))
        cosines.append(F.cosine_similarity(grads[0], grads[1], dim=1))
    cos = torch.cat(cosines)
    return {"predictions_differ": differ, "max_logit_difference": max_diff,
            "gradient_cosine_min": float(cos.min()), "gradient_cosine_median": float(cos.median())}


def measure(name: str, x: torch.Tensor, y: torch.Tensor, batch: int, ragged: int, reps: int) -> dict[str, object]:
    torch._dynamo.reset()  # each model compiles from scratch, under dynamo's recompile limit
    model = load_model(name)
    eager = {"batch": step_seconds(model, x[:batch], y[:batch], reps),
             "ragged": step_seconds(model, x[:ragged], y[:ragged], reps)}
    compiled_model = torch.compile(model, dynamic=True)
    compile_s = {"first": first_call_seconds(compiled_model, x[:batch], y[:batch]),
                 "second_shape": first_call_seconds(compiled_model, x[:ragged], y[:ragged])}
    compiled = {"batch": step_seconds(compiled_model, x[:batch], y[:batch], reps),
                "ragged": step_seconds(compiled_model, x[:ragged], y[:ragged], reps)}
    row: dict[str, object] = {
        "model": name,
        "eager_s": eager,
        "compiled_s": compiled,
        "speedup": {k: eager[k] / compiled[k] for k in eager},
        "compile_s": compile_s,
        **agreement(model, compiled_model, x, y, batch),
    }
    print(f"{name}: step at {batch} {eager['batch']:.3f} s eager, {compiled['batch']:.3f} s compiled "
          f"({eager['batch'] / compiled['batch']:.2f}x); at {ragged} {eager['ragged']:.3f} / "
          f"{compiled['ragged']:.3f} s "
          f"({eager['ragged'] / compiled['ragged']:.2f}x); compile {compile_s['first']:.0f} s + "
          f"{compile_s['second_shape']:.0f} s; {row['predictions_differ']} of {len(y)} predictions differ, logits up "
          f"to {row['max_logit_difference']:.3g} apart, gradient cosine >= {row['gradient_cosine_min']:.4f}",
          flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet20_bireal_at,resnet20_reactnet_at,resnet20_reactnet,resnet20_fp_at")
    p.add_argument("--batch", type=int, default=100, help="images per attack step")
    p.add_argument("--ragged", type=int, default=37, help="a second, smaller batch: the images still standing")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n", type=int, default=1000, help="test images for the agreement check")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    x, y, _ = load_cifar10(n_examples=max(args.n, args.batch))
    rows = [measure(m, x, y, args.batch, args.ragged, args.reps) for m in args.models.split(",")]
    if args.json:
        atomic_write_json({"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "batch": args.batch, "ragged": args.ragged,
                           "n_agreement": args.n, "models": rows}, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
