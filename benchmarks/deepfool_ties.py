"""How often DeepFool's found points sit on the decision boundary to float precision (issue 48's "measurements that
mean what they say").

DeepFool stops a sample as soon as a forward of the samples still running misclassifies its iterate. Steps after the
first reach the boundary from inside, so a found point can lie on it to float precision, and the runner, which reads
the whole batch in one forward, may read it as correctly classified: the sample then counts as robust although the
attack found it. Since revision 1 the attack confirms its hits in that whole-batch forward and pushes an unconfirmed
point on (``DeepFool.confirmed``). This counts, per model and norm, the hits the whole-batch forward would have read
as correct without the confirmation, and after it.

    .venv/bin/python benchmarks/deepfool_ties.py --models resnet20_fp,resnet20_bnn -n 500 \\
        [--out docs/measurements/deepfool_ties.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fused_forward import default_data_dir  # noqa: E402 - the benchmarks' one data-folder rule

from arbibench.attacks import DeepFool  # noqa: E402
from arbibench.attacks.base import predict  # noqa: E402
from arbibench.data.cifar10 import load_cifar10  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.machine import cpu_model  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402


class Unconfirmed(DeepFool):
    """DeepFool as it was before revision 1: the search's own per-step verdicts, not confirmed afterwards."""

    def confirmed(self, model, x, y, found, fooled):  # type: ignore[no-untyped-def]
        return fooled


def count(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, linf: bool, batch: int) -> dict[str, int]:
    """Hits of the unconfirmed search, those of them the whole-batch forward reads as correct, and the same after
    the confirmation."""
    hits = misread = hits_now = misread_now = 0
    for i in range(0, len(y), batch):
        xb, yb = x[i : i + batch], y[i : i + batch]
        found, fooled = Unconfirmed().search(model, xb, yb, linf)
        wrong = predict(model, found) != yb
        hits, misread = hits + int(fooled.sum()), misread + int((fooled & ~wrong).sum())
        found, fooled = DeepFool().search(model, xb, yb, linf)
        wrong = predict(model, found) != yb
        hits_now, misread_now = hits_now + int(fooled.sum()), misread_now + int((fooled & ~wrong).sum())
    return {"hits": hits, "read_as_correct": misread, "hits_confirmed": hits_now, "read_as_correct_after": misread_now}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet20_fp,resnet20_bnn")
    parser.add_argument("-n", type=int, default=500, help="the first N CIFAR-10 test images")
    parser.add_argument("--batch-size", type=int, default=200, help="images per batch, as the protocol's")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON")
    args = parser.parse_args()
    torch.set_num_threads(2)
    x, y, _ = load_cifar10(args.n, data_dir=args.data_dir or default_data_dir())
    rows = []
    for name in args.models.split(","):
        model = load_model(name)
        correct = predict(model, x) == y
        xc, yc = x[correct], y[correct]
        for norm in ("L2", "Linf"):
            start = time.perf_counter()
            row = {"model": name, "norm": norm, "images": int(correct.sum()),
                   **count(model, xc, yc, norm == "Linf", args.batch_size),
                   "seconds": round(time.perf_counter() - start, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        atomic_write_json({"machine": cpu_model(), "threads": 2, "n": args.n, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
