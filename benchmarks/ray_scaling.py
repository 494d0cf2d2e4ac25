"""Protocol throughput on Ray with 1 and 2 workers, and a projection of the full ``cifar10`` protocol's wall time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ray_scaling.py

Part 1 runs one small protocol (two models, three attacks incl. a black-box one) three times on fresh stores: in
this process (``--backend local``), then through a private Ray on this machine (loopback only) with 1 and 2 workers
of one torch thread each; wall time includes the driver's model checks and reading the store back, and the three
stores must hold the same rows. Part 2 times one store batch of every attack of the full ``cifar10`` preset on
``resnet20_bnn`` with :func:`compute_batch` (``--cost-images`` images; the black-box attacks at ``--queries``
queries, default the protocol's 5000), scales each to a 200-image batch (linearly: per-image cost at a small batch is
if anything higher) and, when ``--queries`` is lower, to 5000 queries (linearly: an upper bound, since fooled images
stop querying), and projects the protocol over the zoo by scheduling its store batches longest first
onto 1, 8 and 64 workers, as the driver does.
"""

from __future__ import annotations

import argparse
import heapq
import os
import sqlite3
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the private Ray binds 127.0.0.1 only
# Ray starts its workers at niceness 15; on this shared machine they would then yield to everything else and the
# comparison with the local run (niceness 0) would measure the scheduler, not arbibench.
os.environ.setdefault("RAY_worker_niceness", "0")

import torch  # noqa: E402

from arbibench.attacks import BLACK_BOX, WHITE_BOX, Linf, get_attack  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.evaluation.batch import compute_batch  # noqa: E402
from arbibench.evaluation.checks import run_checks  # noqa: E402
from arbibench.evaluation.store import ResultStore  # noqa: E402
from arbibench.evaluation.surrogates import attack_for_target  # noqa: E402
from arbibench.models.zoo import load_model, zoo_rows  # noqa: E402
from arbibench.protocol.presets import AttackSpec, Protocol, get_protocol  # noqa: E402
from arbibench.protocol.run import run_protocol  # noqa: E402

MODELS = ["resnet20_fp", "resnet20_bnn"]


def small_protocol(n_white: int, n_black: int, batch: int) -> Protocol:
    return Protocol(
        name="scaling", dataset="cifar10", threat_model="Linf", eps=8 / 255, eps_text="8/255",
        attacks=(AttackSpec("fgsm", WHITE_BOX), AttackSpec("pgd", WHITE_BOX),
                 AttackSpec("square", BLACK_BOX, (("max_queries", 200),))),
        n_white_box=n_white, n_black_box=n_black, batch_size=batch, sweep_eps=(), eps_star_attacks=(),
    )  # fmt: skip


def rows(path: Path) -> list[list[tuple]]:
    with sqlite3.connect(path) as c:
        return [sorted(c.execute(q)) for q in ("SELECT eval_key, spec FROM evaluations", "SELECT * FROM outcomes",
                                               "SELECT eval_key, batch_index, n_samples FROM batches")]


def part1(args: argparse.Namespace, folder: Path) -> None:
    from arbibench.evaluation.ray_executor import RayExecutor

    protocol = small_protocol(args.n_white, args.n_black, args.batch)
    n_batches = len(MODELS) * (
        -(-args.n_white // args.batch) * (1 + len(protocol.white_box))
        + -(-args.n_black // args.batch) * (1 + len(protocol.black_box))
    )
    images = len(MODELS) * (args.n_white * len(protocol.white_box) + args.n_black * len(protocol.black_box))
    print(f"## protocol: {len(MODELS)} models, fgsm + pgd on {args.n_white} images, square(200 queries) on "
          f"{args.n_black}; batch {args.batch} ({n_batches} store batches incl. clean passes)\n")
    print("| backend | workers | Ray start s | protocol wall s | batches/s | attacked images/s | rows equal to local |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    reference = None
    for name, workers in (("local", 0), ("ray", 1), ("ray", 2)):
        path = folder / f"{name}-{workers}.db"
        backend = None if name == "local" else RayExecutor(workers=workers, worker_threads=1)
        t0 = time.perf_counter()
        if backend is not None:
            backend._start()  # a private Ray on this machine and its workers: timed apart from the protocol
        start = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            with ResultStore(path) as store:
                run_protocol(protocol, MODELS, store, data_dir=args.data_dir, progress=False, backend=backend)
        finally:
            if backend is not None:
                backend.close()
        wall = time.perf_counter() - t0
        got = rows(path)
        reference = reference or got
        same = "yes" if got == reference else "NO"
        print(f"| {name} | {workers or '-'} | {start:.1f} | {wall:.1f} | {n_batches / wall:.2f} | "
              f"{images / wall:.1f} | {same} |")


def part2(args: argparse.Namespace) -> None:
    full = get_protocol("cifar10")
    model = load_model("resnet20_bnn")
    x, y, _ = load_cifar10(args.cost_images, data_dir=args.data_dir)
    threat = Linf(full.eps)
    dev = torch.device("cpu")
    t0 = time.perf_counter()
    clean = compute_batch(model, None, threat, 0, 0, x, y, None, dev, oracle=model)
    per_image = {"clean": (time.perf_counter() - t0) / len(y)}
    clean_ok = torch.tensor(clean.clean_correct)
    scale: dict[str, float] = {"clean": 1.0}
    for spec in full.attacks:
        kwargs = dict(spec.kwargs)
        if "max_queries" in kwargs:
            scale[spec.name] = kwargs["max_queries"] / args.queries
            kwargs["max_queries"] = args.queries
        attack = attack_for_target(get_attack(spec.name, **kwargs), "resnet20_bnn")
        t0 = time.perf_counter()
        compute_batch(model, attack, threat, 0, 0, x, y, clean_ok, dev, oracle=model)
        per_image[spec.name] = (time.perf_counter() - t0) / len(y)
        scale.setdefault(spec.name, 1.0)
    t0 = time.perf_counter()
    run_checks(model, x.repeat(5, 1, 1, 1)[:100], y.repeat(5)[:100], threat, {}, (), dev)
    checks_s = time.perf_counter() - t0
    bs = full.batch_size
    batch_s = {k: per_image[k] * bs * scale[k] for k in per_image}
    print(f"\n## one store batch on resnet20_bnn ({args.cost_images} images timed, scaled to {bs} images; black-box "
          f"timed at {args.queries} queries, scaled to 5000)\n")
    print("| attack | family | s / image measured | s / 200-image batch (projected) |")
    print("| --- | --- | ---: | ---: |")
    family = {s.name: s.family for s in full.attacks}
    for k in per_image:
        print(f"| {k} | {family.get(k, '-')} | {per_image[k]:.3f} | {batch_s[k]:.1f} |")
    print(f"\ndriver-side model checks per model (zero gradients, huge eps; 100 images): {checks_s:.1f} s")

    _print_projection(full, per_image, batch_s, checks_s)


def _print_projection(
    full: Protocol, per_image: dict[str, float], batch_s: dict[str, float], checks_s: float
) -> None:
    """The full protocol's store batches over the shipped models, timed from one measured batch each, on 1, 8 and
    64 workers (clean passes first, then attack batches longest first), plus the sequential eps* and checks."""
    bs = full.batch_size
    n_models = len([r for r in zoo_rows() if r["dataset"] == "cifar10" and r["present"]])
    white = [bs] * (10_000 // bs)
    black = [bs, bs, 500 - 2 * bs]
    sweep_imgs = [bs] * (full.n_sweep // bs)
    clean_jobs, attack_jobs = [], []
    for _ in range(n_models):
        clean_jobs += [batch_s["clean"] * n / bs for n in white + black + sweep_imgs]
        for spec in full.attacks:
            sizes = white if spec.family == WHITE_BOX else black
            attack_jobs += [batch_s[spec.name] * n / bs for n in sizes]
        attack_jobs += [batch_s[full.sweep_attack] * n / bs for _ in full.sweep_eps for n in sweep_imgs]
    # eps*: apgd_ce bisection on the 500 black-box images, rounds one after another, model after model (a lower
    # bound: one evaluation per round; on many workers each round lasts one batch)
    eps_star_rounds = 1 + full.eps_star_rounds
    eps_star_work = n_models * eps_star_rounds * 500 * per_image[full.sweep_attack]
    eps_star_latency = n_models * eps_star_rounds * batch_s[full.sweep_attack]
    total = sum(clean_jobs) + sum(attack_jobs) + eps_star_work + n_models * checks_s
    print(f"\n## projection: full cifar10 protocol over the {n_models} shipped CIFAR-10 models\n")
    print(f"{len(clean_jobs) + len(attack_jobs)} store batches + eps* (at least {eps_star_rounds} rounds a model); "
          f"{total / 3600:.1f} h of single-core compute in all\n")
    print("| workers | projected wall time | of which eps* and checks (sequential) | speed-up vs 1 worker |")
    print("| ---: | ---: | ---: | ---: |")
    base = None
    for w in (1, 8, 64):
        span = makespan(clean_jobs, w) + makespan(sorted(attack_jobs, reverse=True), w)
        tail = max(eps_star_latency, eps_star_work / w) + n_models * checks_s
        wall = span + tail
        base = base or wall
        print(f"| {w} | {wall / 3600:.1f} h | {tail / 3600:.2f} h | {base / wall:.1f}x |")


def makespan(jobs: list[float], workers: int) -> float:
    """Finish time of ``jobs`` handed in order to whichever of ``workers`` frees up first."""
    free = [0.0] * workers
    for job in jobs:
        heapq.heappush(free, heapq.heappop(free) + job)
    return max(free)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-white", type=int, default=200)
    parser.add_argument("--n-black", type=int, default=50)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--cost-images", type=int, default=20)
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--data-dir", default=os.environ.get("ARBIBENCH_DATA"))
    parser.add_argument("--skip-part1", action="store_true")
    parser.add_argument("--skip-part2", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, 1 torch thread per process; "
          f"load average at start {os.getloadavg()[0]:.1f}\n")
    if not args.skip_part1:
        with tempfile.TemporaryDirectory() as folder:
            part1(args, Path(folder))
    if not args.skip_part2:
        part2(args)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
