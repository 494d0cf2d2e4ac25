"""One AutoAttack component alone, per image and per seed: arbibench's against the reference's, on identical images.

In ``benchmarks/autoattack_per_image.py`` the two libraries' ensembles are compared with one seed each, so a few
images apart may be chance: a random search (Square) or a random start (APGD) breaks an image on one draw and not on
the next. This script runs one component alone, on the same images for both, with several seeds:

- ``--component square``: the images of a per-image piece (``--pieces``, files written by ``autoattack_per_image.py``)
  that were correctly classified and that either library's APGD-CE, APGD-T and FAB-T left robust (the images Square
  decides); variants: arbibench's Square as AutoAttack configures it, arbibench's with the reference's schedule of
  ``p`` (``rescale_schedule=False``), and the reference's (PyPI ``pyautoattack`` 0.2.0 ``SquareAttack`` with the
  standard version's settings: ``p_init`` 0.8, 5000 queries, one restart, ``resc_schedule=False``);
- ``--component apgd-ce``: every correctly classified image of the piece; variants: arbibench's APGD-CE, arbibench's
  started from the very point the reference draws for the same seed (so that only the two codes' steps differ, not
  their random starts), two starts that take one part from each start (``arbibench_scaled_start``: arbibench's
  uniform numbers with the reference's scaling to a largest entry of 1; ``arbibench_reference_stream``: the
  reference's uniform numbers, unscaled), so a gap between the two starts is traced to its numbers or its formula,
  and the reference's ``APGDAttack`` (100 steps, one restart, rho 0.75, CE loss: the standard version's first
  component);
- the seeds: ``--seeds``; arbibench's generator is the one AutoAttack would give the component for that seed draw.

Every adversarial example is checked against the Linf ball and the [0, 1] box and re-scored on the model before it
counts. One JSON file per (component, model, eps), rewritten atomically after every (variant, seed), so a run resumes
where it stopped; ``--summary`` prints per variant the images fooled per seed and, per image, how often each one
broke it.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_component_seeds.py --threads 2 --seeds 0,1,2,3,4 \\
        --component square --out docs/measurements/autoattack_component_seeds
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_component_seeds.py --threads 2 --seeds 0,1,2,3,4 \\
        --component apgd-ce --out docs/measurements/autoattack_component_seeds
    .venv/bin/python benchmarks/autoattack_component_seeds.py --summary \\
        --out docs/measurements/autoattack_component_seeds
    .venv/bin/python benchmarks/autoattack_component_seeds.py --check-starts --seeds 0,1,2 \\
        --out docs/measurements/autoattack_component_seeds
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_component_seeds.py --threads 2 --component apgd-ce \\
        --piece-glob '*eps6-255_seed0.json' --seeds 0,1,...,47 \\
        --variants arbibench_scaled_start,arbibench_reference_stream --out docs/measurements/autoattack_component_seeds
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arbibench.attacks import Linf, get_attack, parse_eps
from arbibench.attacks.autoattack import component_generator
from arbibench.data import load_cifar10
from arbibench.files import atomic_write_json
from arbibench.machine import describe
from arbibench.models.zoo import load_model

VARIANTS = {"square": ("arbibench", "arbibench_reference_schedule", "reference"),
            "apgd-ce": ("arbibench", "arbibench_reference_start", "arbibench_scaled_start",
                        "arbibench_reference_stream", "reference")}
BLOCK = 48  # the summary splits the seeds into blocks of 48: the study ran 48, then 48 more to test what it found
GRADIENT_COMPONENTS = {"apgd_ce", "apgd_t", "fab_t", "apgd-ce", "apgd-t", "fab-t"}


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pieces", type=Path, default=Path("docs/measurements/autoattack_per_image"),
                    help="folder of autoattack_per_image.py's piece files (the images come from there)")
    ap.add_argument("--piece-glob", default="*.json",
                    help="which piece files of --pieces to take, e.g. '*6-255_seed0.json' (default: every one)")
    ap.add_argument("--component", choices=tuple(VARIANTS), default="square")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    ap.add_argument("--variants", default=None,
                    help="comma-separated variants to run (default: every variant of the component)")
    ap.add_argument("--queries", type=int, default=5000, help="Square's budget (5000: AutoAttack's standard)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", type=Path, required=True, help="folder of the per-(model, eps) JSON files")
    ap.add_argument("--summary", action="store_true", help="only print the tables from the files in --out")
    ap.add_argument("--check-starts", action="store_true",
                    help="only compare the two libraries' APGD-CE random starts on the pieces' images, per seed")
    return ap.parse_args()


def survivors(piece: dict[str, Any]) -> list[int]:
    """Positions (in the piece's image list) that were correct and that either library's gradient part left."""
    ours = piece["arbibench"]["square_variants"]["configured"]["fooled_by"]
    ref = piece["reference"]["fooled_by"]
    return [i for i, ok in enumerate(piece["correct"])
            if ok and (ours[i] not in GRADIENT_COMPONENTS or ref[i] not in GRADIENT_COMPONENTS)]


def _fooled(model: torch.nn.Module, x_adv: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            eps: float) -> list[bool]:
    """Per image: misclassified, inside the Linf ball (float32 tolerance) and inside the [0, 1] box."""
    inside = (x_adv - x).abs().flatten(1).amax(1) <= eps + 1e-6
    boxed = (x_adv.flatten(1).amin(1) >= 0) & (x_adv.flatten(1).amax(1) <= 1)
    with torch.no_grad():
        wrong = model(x_adv).argmax(1) != y
    return (wrong & inside & boxed).tolist()


@dataclass(frozen=True)
class _StartAt(Linf):
    """The Linf ball, with the random start fixed to ``start`` (the images of the call, in their order)."""

    start: torch.Tensor | None = None

    def random_start(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        assert self.start is not None and self.start.shape == x.shape
        return self.start.clone()


def reference_start(x: torch.Tensor, eps: float, seed: int) -> torch.Tensor:
    """The start the reference's APGD-CE draws for ``seed`` on ``x``: it seeds torch's global generator, draws
    ``t`` uniform in [-1, 1], scales each image's ``t`` to a largest entry of 1, and clamps ``x + eps t`` to [0, 1]."""
    with torch.random.fork_rng(devices=[]):
        torch.random.manual_seed(seed)
        t = 2 * torch.rand(x.shape) - 1
    t = t / (t.flatten(1).abs().amax(1).view(-1, 1, 1, 1) + 1e-12)
    return (x + eps * t).clamp(0.0, 1.0)


def split_start(x: torch.Tensor, eps: float, seed: int, *, stream: str, scaled: bool) -> torch.Tensor:
    """A start that takes one of the two starts' parts from each: the uniform numbers of ``stream`` ("arbibench":
    AutoAttack's generator for APGD-CE, as arbibench's own start draws them; "reference": torch's global generator
    seeded with ``seed``, as the reference draws them), ``scaled`` to a largest entry of 1 per image (the reference's
    formula) or not (arbibench's); then clamped to the eps-box and [0, 1]. Which part carries a gap between the two
    starts is what the variants built on it measure."""
    if stream == "arbibench":
        draw = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(seed)))
        u = torch.rand(x.shape, generator=component_generator(draw, "apgd_ce"), dtype=torch.float32)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.random.manual_seed(seed)
            u = torch.rand(x.shape)
    t = 2 * u - 1
    if scaled:
        t = t / (t.flatten(1).abs().amax(1).view(-1, 1, 1, 1) + 1e-12)
    return Linf(eps).project(x + eps * t, x)


def _apgd_ce(variant: str, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float,
             seed: int) -> torch.Tensor:
    starts = {"arbibench_reference_start": lambda: reference_start(x, eps, seed),
              "arbibench_scaled_start": lambda: split_start(x, eps, seed, stream="arbibench", scaled=True),
              "arbibench_reference_stream": lambda: split_start(x, eps, seed, stream="reference", scaled=False)}
    if variant in starts:
        threat = _StartAt(eps, start=starts[variant]())
        fixed: torch.Tensor = get_attack("apgd_ce")(model, x, y, threat, torch.Generator().manual_seed(seed))
        return fixed
    if variant == "reference":
        from pyautoattack.autopgd_base import APGDAttack

        ref = APGDAttack(model, n_iter=100, norm="Linf", n_restarts=1, eps=eps, seed=seed, loss="ce", eot_iter=1,
                         rho=0.75, verbose=False, device="cpu")
        adv: torch.Tensor = ref.perturb(x.contiguous(), y)
        return adv
    draw = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(seed)))
    result: torch.Tensor = get_attack("apgd_ce")(model, x, y, Linf(eps), component_generator(draw, "apgd_ce"))
    return result


def _square(variant: str, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, seed: int,
            queries: int) -> torch.Tensor:
    if variant == "reference":
        from pyautoattack.square import SquareAttack

        ref = SquareAttack(model, norm="Linf", n_queries=queries, eps=eps, p_init=0.8, n_restarts=1, seed=seed,
                           verbose=False, resc_schedule=False, device="cpu")
        adv: torch.Tensor = ref.perturb(x.contiguous(), y)
        return adv
    attack = get_attack("square", max_queries=queries, p_init=0.8,
                        rescale_schedule=variant == "arbibench")
    draw = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(seed)))
    result: torch.Tensor = attack(model, x, y, Linf(eps), component_generator(draw, "square"))
    return result


def _run_group(path: Path, model_name: str, eps_text: str, positions: list[int], indices: list[int],
               args: argparse.Namespace) -> None:
    eps = parse_eps(eps_text)
    record: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "component": args.component, "model": model_name, "eps": eps_text,
        "indices": [indices[i] for i in positions], "queries": args.queries, "runs": [],
    }
    if record["indices"] != [indices[i] for i in positions] or record["queries"] != args.queries:
        raise SystemExit(f"{path} holds other images or another budget: move it away to start over")
    done = {(r["variant"], r["seed"]) for r in record["runs"]}
    variants = VARIANTS[args.component] if args.variants is None else tuple(args.variants.split(","))
    unknown = set(variants) - set(VARIANTS[args.component])
    if unknown:
        raise SystemExit(f"--variants: {', '.join(sorted(unknown))} not a variant of {args.component}; "
                         f"known: {', '.join(VARIANTS[args.component])}")
    todo = [(v, s) for s in (int(t) for t in args.seeds.split(",")) for v in variants if (v, s) not in done]
    if not todo:
        print(f"{path.name}: done, kept")
        return
    model = load_model(model_name).eval()
    n = max(record["indices"]) + 1
    x_all, y_all, _ = load_cifar10(n, data_dir=args.data_dir)
    pick = torch.tensor(record["indices"])
    x, y = x_all[pick], y_all[pick]
    for variant, seed in todo:
        t0 = time.perf_counter()
        x_adv = (_square(variant, model, x, y, eps, seed, args.queries) if args.component == "square"
                 else _apgd_ce(variant, model, x, y, eps, seed))
        seconds = time.perf_counter() - t0
        fooled = _fooled(model, x_adv, x, y, eps)
        record["runs"].append({"variant": variant, "seed": seed, "fooled": fooled, "seconds": round(seconds, 1),
                               "cpu": describe(torch.get_num_threads())})
        atomic_write_json(record, path)
        print(f"{path.name}: {variant} seed {seed}: {sum(fooled)}/{len(fooled)} fooled, {seconds:.0f} s", flush=True)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if both sides were equally likely."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _summary(out: Path) -> None:
    files = sorted(out.glob("*.json"))
    if not files:
        raise SystemExit(f"no files in {out}: run without --summary first")
    print("| component | model | eps | images | variant | seeds | fooled per seed | mean fooled (SD) "
          "| median s per run |")
    print("| --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: |")
    for f in files:
        r = json.loads(f.read_text())
        component = r.get("component", "square")
        for v in VARIANTS[component]:
            runs = sorted((x for x in r["runs"] if x["variant"] == v), key=lambda x: x["seed"])
            if not runs:
                continue
            counts = [sum(x["fooled"]) for x in runs]
            secs = statistics.median(x["seconds"] for x in runs)  # median: a run that shared the cores stays out
            sd = f" ({statistics.stdev(counts):.2f})" if len(counts) > 1 else ""
            print(f"| {component} | {r['model']} | {r['eps']} | {len(r['indices'])} | {v} | {len(runs)} | "
                  f"{', '.join(map(str, counts))} | {sum(counts) / len(counts):.1f}{sd} | {secs:.0f} |")
    print("\nPer image, seeds that broke it (arbibench vs the reference; only seeds both ran):")
    print("| component | model | eps (variant, seeds) | images arbibench broke more often | "
          "images the reference broke more often | sign test p |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for f in files:
        r = json.loads(f.read_text())
        component = r.get("component", "square")
        for ours_v in [v for v in VARIANTS[component] if v != "reference"]:
            ours = {x["seed"]: x["fooled"] for x in r["runs"] if x["variant"] == ours_v}
            ref = {x["seed"]: x["fooled"] for x in r["runs"] if x["variant"] == "reference"}
            seeds = sorted(set(ours) & set(ref))
            if not seeds:
                continue
            wins = losses = 0
            for i in range(len(r["indices"])):
                a = sum(ours[s][i] for s in seeds)
                b = sum(ref[s][i] for s in seeds)
                wins += a > b
                losses += b > a
            print(f"| {component} | {r['model']} | {r['eps']} ({ours_v}, {len(seeds)} seeds) | {wins} | {losses} | "
                  f"{sign_test_p(wins, losses):.2f} |")
    for f in files:
        r = json.loads(f.read_text())
        same = {x["seed"]: x["fooled"] for x in r["runs"] if x["variant"] == "arbibench_reference_start"}
        ref = {x["seed"]: x["fooled"] for x in r["runs"] if x["variant"] == "reference"}
        seeds = sorted(set(same) & set(ref))
        if seeds:
            apart = [(s, i) for s in seeds for i in range(len(r["indices"])) if same[s][i] != ref[s][i]]
            print(f"\nFrom the same start ({r['model']}, {r['eps']}, {len(seeds)} seeds): arbibench and the reference "
                  f"disagree on {len(apart)} of {len(seeds) * len(r['indices'])} image-seeds "
                  f"{'(seed, image position): ' + str(apart) if apart else ''}")
        _start_comparisons(r)


def _start_comparisons(r: dict[str, Any]) -> None:
    """Each start that takes a part from the reference's, against arbibench's own start, on one (model, eps) file:
    the difference of the means with its Welch t (per block of seeds too), the spread, and the per-image test."""
    runs: dict[str, dict[int, list[bool]]] = {}
    for x in r["runs"]:
        runs.setdefault(x["variant"], {})[x["seed"]] = x["fooled"]
    own = runs.get("arbibench", {})
    for start in ("arbibench_reference_start", "arbibench_scaled_start", "arbibench_reference_stream"):
        theirs = runs.get(start, {})
        if len(own) < 2 or len(theirs) < 2:
            continue
        diff, t = welch([sum(v) for v in own.values()], [sum(v) for v in theirs.values()])
        chi2, df, p = per_image_homogeneity(list(own.values()), list(theirs.values()))
        sd_own, sd_theirs = (statistics.stdev(sum(v) for v in runs_.values()) for runs_ in (own, theirs))
        print(f"arbibench's code, {start} against its own start ({len(theirs)} and {len(own)} seeds): "
              f"{diff:+.2f} images fooled, Welch t = {t:.1f}; SD {sd_theirs:.2f} against {sd_own:.2f}; "
              f"per image chi2 = {chi2:.1f} on {df} images, p = {p:.2f}")
        rates = [(sum(v[i] for v in theirs.values()) / len(theirs) - sum(v[i] for v in own.values()) / len(own), i)
                 for i in range(len(r["indices"]))]
        rates.sort()
        print("    largest per-image differences of the share of seeds that broke it (position: difference): "
              + ", ".join(f"{i}: {d:+.2f}" for d, i in rates[-3:][::-1] + rates[:2]))
        for b in sorted({s // BLOCK for s in theirs}) if len({s // BLOCK for s in theirs}) > 1 else ():
            a_b = [sum(v) for s, v in own.items() if s // BLOCK == b]
            t_b = [sum(v) for s, v in theirs.items() if s // BLOCK == b]
            if len(a_b) > 1 and len(t_b) > 1:
                d_b, tt = welch(a_b, t_b)
                print(f"    seeds {b * BLOCK}-{b * BLOCK + BLOCK - 1}: {d_b:+.2f} ({len(t_b)} and {len(a_b)} seeds), "
                      f"Welch t = {tt:.1f}")
    _formula_pairs(runs)


def _formula_pairs(runs: dict[str, dict[int, list[bool]]]) -> None:
    """The starts that share their numbers and differ only in the formula (scaled to a largest entry of 1 or not),
    paired seed by seed: what the formula alone moves."""
    for unscaled, scaled in (("arbibench", "arbibench_scaled_start"),
                             ("arbibench_reference_stream", "arbibench_reference_start")):
        seeds = sorted(set(runs.get(unscaled, {})) & set(runs.get(scaled, {})))
        if len(seeds) > 1:
            d = [sum(runs[scaled][s]) - sum(runs[unscaled][s]) for s in seeds]
            print(f"the formula alone, {scaled} - {unscaled} (the same numbers, {len(seeds)} seeds paired): "
                  f"{statistics.mean(d):+.2f} images fooled, SD of a seed's difference {statistics.stdev(d):.2f}")


def chi2_upper_p(chi2: float, df: int) -> float:
    """P(X >= chi2) for X chi-squared with ``df`` degrees of freedom (Wilson-Hilferty: within 0.01 from df 10)."""
    z = ((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def per_image_homogeneity(a: list[list[bool]], b: list[list[bool]]) -> tuple[float, int, float]:
    """Whether two sets of runs (one list of per-image outcomes per seed) break each image equally often: the sum
    over images of the squared two-proportion z, chi-squared with one degree per image that either broke sometimes
    but not always. Unlike the difference of the means, it looks at every image: a stream that favoured some images
    would show there even where the totals agree."""
    chi2, df = 0.0, 0
    for i in range(len(a[0])):
        ka, kb = sum(run[i] for run in a), sum(run[i] for run in b)
        pooled = (ka + kb) / (len(a) + len(b))
        if 0 < pooled < 1:
            chi2 += (ka / len(a) - kb / len(b)) ** 2 / (pooled * (1 - pooled) * (1 / len(a) + 1 / len(b)))
            df += 1
    return chi2, df, chi2_upper_p(chi2, df) if df else 1.0


def welch(own: list[int], theirs: list[int]) -> tuple[float, float]:
    """The difference of the means (theirs - own) and its Welch t."""
    se = math.sqrt(statistics.variance(own) / len(own) + statistics.variance(theirs) / len(theirs))
    diff = statistics.mean(theirs) - statistics.mean(own)
    return diff, diff / se if se > 0 else math.inf


def check_starts(x: torch.Tensor, eps: float, seeds: list[int]) -> None:
    """Whether the two random starts differ in distribution: per seed, mean |delta| / eps and the share of pixels
    within 1% of the eps-box's edge, for arbibench's start (AutoAttack's generator for APGD-CE) and the reference's."""
    print("| seed | start | mean abs(delta) / eps | pixels within 1% of the edge |")
    print("| ---: | --- | ---: | ---: |")
    for seed in seeds:
        draw = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(seed)))
        ours = Linf(eps).random_start(x, component_generator(draw, "apgd_ce")) - x
        theirs = reference_start(x, eps, seed) - x
        for label, d in (("arbibench", ours), ("reference", theirs)):
            d = (d / eps).abs()
            print(f"| {seed} | {label} | {float(d.mean()):.4f} | {100 * float((d > 0.99).float().mean()):.2f}% |")
    _check_streams(x, eps, seeds)


def _check_streams(x: torch.Tensor, eps: float, seeds: list[int]) -> None:
    """The two starts' uniform numbers over all ``seeds``: a 64-bin histogram's chi-squared (63 degrees), and the
    spread of the correlations between two images' numbers within a seed and between two seeds' numbers, each
    against 1 / sqrt(n), what independent numbers give: a stream that failed one could explain a gap in the starts."""
    print("\n| start | seeds | histogram chi2 (63 df), p | corr. between images, SD (expected) "
          "| corr. between seeds, SD (expected) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    n_img, d = x.shape[0], x[0].numel()
    for label in ("arbibench", "reference"):
        draws = []
        for seed in seeds:  # the numbers t in [-1, 1] of each start, before any scaling or clamping
            t = (split_start(torch.full_like(x, 0.5), 0.5, seed, stream=label, scaled=False) - 0.5) * 2
            draws.append(t.reshape(n_img, d).double())
        u = torch.stack(draws)
        hist = torch.histc(u, 64, -1, 1)
        chi2 = float(((hist - hist.mean()) ** 2 / hist.mean()).sum())
        within = torch.stack([torch.corrcoef(t)[~torch.eye(n_img, dtype=torch.bool)] for t in draws]).std()
        across = torch.corrcoef(u.reshape(len(seeds), -1))[~torch.eye(len(seeds), dtype=torch.bool)].std()
        print(f"| {label} | {len(seeds)} | {chi2:.1f}, {chi2_upper_p(chi2, 63):.2f} | {float(within):.5f} "
              f"({d ** -0.5:.5f}) | {float(across):.6f} ({(n_img * d) ** -0.5:.6f}) |")


def main() -> None:
    args = _arguments()
    if args.summary:
        _summary(args.out)
        return
    try:
        import pyautoattack  # noqa: F401
    except ImportError:
        raise SystemExit("pyautoattack is not installed: pip install --no-deps pyautoattack==0.2.0") from None
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    pieces = sorted(args.pieces.glob(args.piece_glob))
    if not pieces:
        raise SystemExit(f"no piece files {args.piece_glob} in {args.pieces}: run benchmarks/autoattack_per_image.py "
                         "first")
    if args.check_starts:
        piece = json.loads(pieces[0].read_text())
        x_all, _, _ = load_cifar10(max(piece["indices"]) + 1, data_dir=args.data_dir)
        rows = [piece["indices"][i] for i, ok in enumerate(piece["correct"]) if ok]
        check_starts(x_all[torch.tensor(rows)], parse_eps(piece["eps"]), [int(t) for t in args.seeds.split(",")])
        return
    for p in pieces:
        piece = json.loads(p.read_text())
        positions = (survivors(piece) if args.component == "square"
                     else [i for i, ok in enumerate(piece["correct"]) if ok])
        prefix = "" if args.component == "square" else f"{args.component}_"
        name = f"{prefix}{piece['model']}_eps{piece['eps'].replace('/', '-')}_from_seed{piece['seed']}.json"
        _run_group(args.out / name, piece["model"], piece["eps"], positions, piece["indices"], args)
    _summary(args.out)


if __name__ == "__main__":
    main()
