"""Thread oversubscription: the fused BNN forward and an attack's gradient steps, alone and beside a busy neighbour.

A user's evaluation often shares the machine with something else (a training run, a second evaluation). Torch's
OpenMP workers spin-wait between operations; when more threads want the cores than the process's share of them,
spinning workers burn the time slices the working threads need. This measures, each configuration in a fresh
process (OpenMP reads its environment once, at start):

- workload ``fused``: no-grad forwards of a zoo BNN through its fused inference path (what Square and every
  query-based attack spend their time on), ``--forwards`` batches of 128 CIFAR-10 test images;
- workload ``gradient``: ``--steps`` forward-backward passes of the same model on 32 images (APGD's inner loop);
- neighbour: none, or one process that trains a small convolutional network on 2 threads (as a training run does);
- torch threads 1 or 2, and the OpenMP wait policy (libgomp's default, or ``OMP_WAIT_POLICY=PASSIVE``);
- what arbibench's CLI picks by default (``arbibench.machine.default_threads``).

Each row: wall seconds and the process's CPU seconds (user + system), median of ``--repeats`` runs.

    .venv/bin/python benchmarks/oversubscription.py --json docs/measurements/oversubscription.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = "--child"


def _neighbour() -> None:
    """A busy neighbour: SGD on a small CNN at 2 threads, forever (killed by the parent)."""
    import torch

    torch.set_num_threads(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3),
                              torch.nn.Flatten(), torch.nn.LazyLinear(10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    while True:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def _child(workload: str, threads: int, model_name: str, count: int) -> None:
    """One measurement, printed as JSON: wall and CPU seconds of the workload."""
    import torch

    from arbibench.data import load_cifar10
    from arbibench.models.zoo import load_model
    from arbibench.nn.fused import fused_path

    torch.set_num_threads(threads)
    model = load_model(model_name).eval()
    x, y, _ = load_cifar10(128)
    if workload == "fused":
        fused, _ = fused_path(model)
        with torch.no_grad():
            fused(x)  # warm-up
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(count):
                fused(x)
    else:
        xs, ys = x[:32].clone().requires_grad_(True), y[:32]
        torch.nn.functional.cross_entropy(model(xs), ys).backward()  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(count):
            xs.grad = None
            torch.nn.functional.cross_entropy(model(xs), ys).backward()
    print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}))


def _measure(workload: str, threads: int, passive: bool, neighbour: bool, args: argparse.Namespace) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = str(threads)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    count = args.forwards if workload == "fused" else args.steps
    walls, cpus = [], []
    for _ in range(args.repeats):
        busy = None
        if neighbour:
            busy = subprocess.Popen([sys.executable, __file__, CHILD, "neighbour"], env=dict(os.environ))
            time.sleep(3)  # let it reach its loop
        try:
            out = subprocess.run([sys.executable, __file__, CHILD, workload, str(threads), args.model, str(count)],
                                 env=env, check=True, capture_output=True, text=True).stdout
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        row = json.loads(out.strip().splitlines()[-1])
        walls.append(row["wall"])
        cpus.append(row["cpu"])
    return {"wall": round(statistics.median(walls), 2), "cpu": round(statistics.median(cpus), 2)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        if sys.argv[2] == "neighbour":
            _neighbour()
        else:
            _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet20_bnn")
    ap.add_argument("--forwards", type=int, default=40, help="fused forwards of 128 images per run")
    ap.add_argument("--steps", type=int, default=20, help="forward-backward passes of 32 images per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from arbibench.files import atomic_write_json
    from arbibench.machine import available_cores, default_threads, describe

    rows = []
    print(f"{describe(os.cpu_count() or 1)}; cores this process may use: {available_cores()}; "
          f"arbibench's default threads: {default_threads()}")
    print("| workload | neighbour | threads | wait policy | wall s | CPU s |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    for workload in ("fused", "gradient"):
        for neighbour in (False, True):
            for threads, passive in ((1, False), (2, False), (2, True)):
                m = _measure(workload, threads, passive, neighbour, args)
                policy = "PASSIVE" if passive else "default"
                rows.append({"workload": workload, "neighbour": neighbour, "threads": threads,
                             "wait_policy": policy, **m})
                print(f"| {workload} | {'training, 2 threads' if neighbour else 'none'} | {threads} | {policy} | "
                      f"{m['wall']:.2f} | {m['cpu']:.2f} |", flush=True)
    if args.json:
        atomic_write_json({"model": args.model, "cpu": describe(os.cpu_count() or 1),
                           "available_cores": available_cores(), "default_threads": default_threads(),
                           "repeats": args.repeats, "forwards": args.forwards, "steps": args.steps,
                           "rows": rows}, args.json)


if __name__ == "__main__":
    main()
