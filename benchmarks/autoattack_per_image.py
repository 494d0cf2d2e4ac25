"""AutoAttack (standard version) per image and per component: arbibench against the reference implementation.

On a gradient-masking model most images fall to APGD-CE, and the few that survive decide ACC*: which component breaks
which image is where two implementations of the same ensemble can differ. For each (model, eps, seed) piece this runs,
on the first ``--n`` CIFAR-10 test images:

- arbibench: the ensemble's components in order (APGD-CE, APGD-T, FAB-T, Square), each on the images every earlier
  one left correctly classified, with the generators :class:`arbibench.attacks.autoattack.AutoAttack` gives them;
  with ``--both-schedules``, Square twice on the same survivors: with the schedule of ``p`` the ensemble configures
  and with the other one (``rescale_schedule`` flipped), so a schedule's effect is measured on identical images
  (``benchmarks/autoattack_component_seeds.py`` measures it over several seeds);
- the reference (PyPI ``pyautoattack`` 0.2.0, the authors' code): the same loop over its own attack objects, as its
  ``run_standard_evaluation`` does it (one batch, seed ``--seed``).

Every adversarial example of both is checked against the threat model (Linf ball, [0, 1] box) and re-scored on the
model here before it counts. A piece writes one JSON file (per image: the component that fooled it, or null; per
component: images attacked, fooled, seconds; a library's seconds are its components' sum), so the run resumes piece
by piece, and with ``--resume-dir`` a piece cut short resumes after its last finished component; ``--summary`` reads
them all back.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/autoattack_per_image.py --threads 2 \\
        --models resnet20_reactnet_at,resnet20_bireal_at --eps 6/255,8/255 --seeds 0,1,2 --n 200 \\
        --out docs/measurements/autoattack_per_image
    .venv/bin/python benchmarks/autoattack_per_image.py --summary --out docs/measurements/autoattack_per_image
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autoattack_component_seeds import sign_test_p  # noqa: E402

from arbibench.attacks import Linf, get_attack, parse_eps  # noqa: E402
from arbibench.attacks.autoattack import component_generator  # noqa: E402
from arbibench.data import load_cifar10  # noqa: E402
from arbibench.files import atomic_write_json  # noqa: E402
from arbibench.machine import describe  # noqa: E402
from arbibench.models.zoo import load_model  # noqa: E402

REFERENCE_ORDER = ("apgd-ce", "apgd-t", "fab-t", "square")


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet20_reactnet_at,resnet20_bireal_at")
    ap.add_argument("--eps", default="6/255,8/255", help="comma-separated Linf budgets")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (both libraries)")
    ap.add_argument("--n", type=int, default=200, help="the first n CIFAR-10 test images")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--square-queries", type=int, default=5000, help="Square's budget in both (5000: standard)")
    ap.add_argument("--both-schedules", action="store_true",
                    help="also run arbibench's Square with the other schedule of p on the same survivors")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", type=Path, required=True, help="folder of the per-piece JSON files")
    ap.add_argument("--summary", action="store_true", help="only print the tables from the files in --out")
    ap.add_argument("--resume-dir", type=Path, default=None,
                    help="keep each piece's finished components in RESUME_DIR/<piece>/state.json, so a piece cut "
                         "short resumes after its last finished component")
    return ap.parse_args()


def _valid(x_adv: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per image: inside the Linf ball (float32 tolerance) and the [0, 1] box."""
    inside = (x_adv - x).abs().flatten(1).amax(1) <= eps + 1e-6
    boxed = (x_adv.flatten(1).amin(1) >= 0) & (x_adv.flatten(1).amax(1) <= 1)
    return inside & boxed


def _score(model: torch.nn.Module, x_adv: torch.Tensor, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    with torch.no_grad():
        wrong = model(x_adv).argmax(1) != y
    return wrong & _valid(x_adv, x, eps)


class _Tally:
    """Which component fooled each image first, and each component's cost; ``on_done`` is called after each one
    (the piece's resume state is written there)."""

    def __init__(self, correct: torch.Tensor, saved: dict[str, Any] | None = None,
                 on_done: Any = None) -> None:
        self.alive = correct.clone() if saved is None else torch.tensor(saved["alive"], dtype=torch.bool)
        self.fooled_by: list[str | None] = [None] * len(correct) if saved is None else list(saved["fooled_by"])
        self.components: list[dict[str, Any]] = [] if saved is None else list(saved["components"])
        self.on_done = on_done

    def state(self) -> dict[str, Any]:
        return {"alive": self.alive.tolist(), "fooled_by": self.fooled_by, "components": self.components}

    def run(self, name: str, attack_alive: Any, x: torch.Tensor, y: torch.Tensor, eps: float,
            model: torch.nn.Module) -> None:
        if any(c["component"] == name for c in self.components):
            return  # finished before the piece was cut short: its outcome is in the resume state
        idx = self.alive.nonzero().squeeze(1)
        if idx.numel() == 0:
            self.components.append({"component": name, "images": 0, "fooled": 0, "seconds": 0.0})
        else:
            t0 = time.perf_counter()
            x_adv = attack_alive(x[idx], y[idx])
            seconds = time.perf_counter() - t0
            fooled = _score(model, x_adv, x[idx], y[idx], eps)
            for i in idx[fooled].tolist():
                self.fooled_by[i] = name
            self.alive[idx[fooled]] = False
            self.components.append({"component": name, "images": int(idx.numel()), "fooled": int(fooled.sum()),
                                    "seconds": round(seconds, 2)})
        if self.on_done is not None:
            self.on_done()


class Resume:
    """A piece's finished components in ``<resume-dir>/<piece>/state.json``, written after each one, so a piece cut
    short (a session's end) resumes after its last finished component; every component draws from its own seeded
    generator, so the resumed piece equals an uninterrupted one. The file is what a queue's run folder holds
    (``epoch``: the components done; ``history``; ``elapsed_s``), so the queue carries it to the branch and
    restores it in the next session."""

    def __init__(self, path: Path | None, total: int) -> None:
        self.path, self.total = path, total
        self.saved: dict[str, Any] = {}
        if path is not None and path.is_file():
            self.saved = json.loads(path.read_text())
        self.tallies: dict[str, _Tally] = {}

    def tally(self, key: str, correct: torch.Tensor) -> _Tally:
        self.tallies[key] = _Tally(correct, self.saved.get("tallies", {}).get(key), self.save)
        return self.tallies[key]

    def save(self) -> None:
        if self.path is None:
            return
        tallies = {**self.saved.get("tallies", {}), **{k: t.state() for k, t in self.tallies.items()}}
        done = [f"{k}: {c['component']}" for k, t in tallies.items() for c in t["components"]]
        elapsed = sum(c["seconds"] for t in tallies.values() for c in t["components"])
        self.saved = {"epoch": len(done), "unit": "component", "recipe": {"epochs": self.total},
                      "history": [{"epoch": i + 1, "component": d} for i, d in enumerate(done)],
                      "elapsed_s": round(elapsed, 1), "tallies": tallies}
        atomic_write_json(self.saved, self.path)


def _ours(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor, eps: float, seed: int,
          queries: int, both_schedules: bool, resume: Resume) -> dict[str, Any]:
    """arbibench's ensemble, component by component; Square also with the other schedule of ``p`` on the same
    survivors when ``both_schedules``."""
    threat = Linf(eps)
    ensemble = get_attack("autoattack")
    draw = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(seed)))
    tally = resume.tally("arbibench", correct)
    gradient_part = [a for a in ensemble.attacks if a.name != "square"]
    for attack in gradient_part:
        def run_it(xs: torch.Tensor, ys: torch.Tensor, a: Any = attack) -> torch.Tensor:
            return a(model, xs, ys, threat, component_generator(draw, a.name))
        tally.run(attack.name, run_it, x, y, eps, model)
    configured = next(a for a in ensemble.attacks if a.name == "square")
    variants = {}
    schedules = [("configured", configured.config.rescale_schedule)]
    if both_schedules:
        schedules.append(("flipped", not configured.config.rescale_schedule))
    for label, rescale in schedules:
        square = get_attack("square", max_queries=queries, p_init=configured.config.p_init, rescale_schedule=rescale)
        branch = resume.tally(f"arbibench square {label}", tally.alive)
        if not branch.components:  # Square's survivors are the gradient part's, with what fooled the others
            branch.fooled_by = list(tally.fooled_by)

        def run_square(xs: torch.Tensor, ys: torch.Tensor, a: Any = square) -> torch.Tensor:
            return a(model, xs, ys, threat, component_generator(draw, "square"))
        branch.run("square", run_square, x, y, eps, model)
        variants[label] = {"rescale_schedule": rescale, "fooled_by": branch.fooled_by,
                           "square": branch.components[-1], "robust": int(branch.alive.sum())}
    return {"components": tally.components, "square_variants": variants}


def _reference(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor, eps: float,
               seed: int, queries: int, resume: Resume) -> dict[str, Any]:
    """The reference's standard loop (its ``run_standard_evaluation`` in one batch), component by component."""
    import pyautoattack

    ref = pyautoattack.AutoAttack(model, norm="Linf", eps=eps, version="standard", seed=seed, device="cpu")
    ref.square.n_queries = queries

    def apgd_ce(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        ref.apgd.loss, ref.apgd.seed = "ce", ref.get_seed()
        return ref.apgd.perturb(xs, ys)

    def apgd_t(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        ref.apgd_targeted.seed = ref.get_seed()
        return ref.apgd_targeted.perturb(xs, ys)

    def fab_t(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        ref.fab.targeted, ref.fab.n_restarts, ref.fab.seed = True, 1, ref.get_seed()
        return ref.fab.perturb(xs, ys)

    def square(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        ref.square.seed = ref.get_seed()
        return ref.square.perturb(xs, ys)

    tally = resume.tally("reference", correct)
    for name, fn in zip(REFERENCE_ORDER, (apgd_ce, apgd_t, fab_t, square), strict=True):
        tally.run(name, fn, x.contiguous(), y, eps, model)
    return {"version": pyautoattack.__version__, "components": tally.components, "fooled_by": tally.fooled_by,
            "robust": int(tally.alive.sum()), "square_rescale_schedule": bool(ref.square.rescale_schedule)}


def _seconds(result: dict[str, Any]) -> float:
    """A library's seconds on a piece: the sum of its components' (across resumes; without the piece's set-up)."""
    parts = [*result["components"], *(v["square"] for v in result.get("square_variants", {}).values())]
    return sum(float(c["seconds"]) for c in parts)


def _piece(model_name: str, eps_text: str, seed: int, args: argparse.Namespace, path: Path) -> None:
    eps = parse_eps(eps_text)
    model = load_model(model_name).eval()
    x, y, idx = load_cifar10(args.n, data_dir=args.data_dir)
    with torch.no_grad():
        correct = model(x).argmax(1) == y
    state = None if args.resume_dir is None else args.resume_dir / path.stem / "state.json"
    resume = Resume(state, total=len(REFERENCE_ORDER) + 3 + (2 if args.both_schedules else 1))
    if resume.saved:
        print(f"{path.name}: resuming after {resume.saved['epoch']} finished components", flush=True)
    ours = _ours(model, x, y, correct, eps, seed, args.square_queries, args.both_schedules, resume)
    reference = _reference(model, x, y, correct, eps, seed, args.square_queries, resume)
    ours_s, ref_s = _seconds(ours), _seconds(reference)
    atomic_write_json({
        "model": model_name, "eps": eps_text, "seed": seed, "images": args.n, "indices": idx.tolist(),
        "correct": correct.tolist(), "square_queries": args.square_queries,
        "cpu": describe(torch.get_num_threads()), "threads": torch.get_num_threads(),
        "arbibench": {**ours, "seconds": round(ours_s, 1)}, "reference": {**reference, "seconds": round(ref_s, 1)},
    }, path)
    if state is not None:  # the piece is whole: its resume state has served
        state.unlink(missing_ok=True)


def _robust(r: dict[str, Any]) -> tuple[list[bool], list[bool]]:
    """Per image of a piece: robust under arbibench's ensemble (its configured Square), under the reference's."""
    conf, ref = r["arbibench"]["square_variants"]["configured"], r["reference"]
    ours = [c and f is None for c, f in zip(r["correct"], conf["fooled_by"], strict=True)]
    theirs = [c and f is None for c, f in zip(r["correct"], ref["fooled_by"], strict=True)]
    return ours, theirs


def _aggregate(rows: list[dict[str, Any]]) -> None:
    """What the issue asks: is arbibench's AutoAttack at or below the reference on average? Robust images summed over
    the pieces of each (model, eps) and over all, the mean paired difference per piece, and the sign test on the
    images that only one library left robust."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["eps"]), []).append(r)
    print("\nOver the pieces (robust images summed; difference = arbibench - reference, mean per piece):")
    print("| model | eps | pieces | correct | arbibench robust | reference robust | difference per piece | "
          "only arbibench robust | only reference robust | sign test p |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, group in [*sorted(groups.items()), (("all", ""), rows)]:
        ours = theirs = only_ours = only_ref = correct = 0
        for r in group:
            a, b = _robust(r)
            ours, theirs, correct = ours + sum(a), theirs + sum(b), correct + sum(r["correct"])
            only_ours += sum(x and not y for x, y in zip(a, b, strict=True))
            only_ref += sum(y and not x for x, y in zip(a, b, strict=True))
        print(f"| {key[0]} | {key[1] or '-'} | {len(group)} | {correct} | {ours} | {theirs} | "
              f"{(ours - theirs) / len(group):+.2f} | {only_ours} | {only_ref} | "
              f"{sign_test_p(only_ours, only_ref):.2f} |")
    _component_sums(groups, rows)


def _component_sums(groups: dict[tuple[str, str], list[dict[str, Any]]], rows: list[dict[str, Any]]) -> None:
    """Images each component fooled, summed over the pieces of each model and over all: where a gap in the robust
    images comes from (a component that receives fewer images can fool fewer, so the images attacked are beside)."""
    print("\nPer component over the pieces (images attacked / fooled, summed):")
    print("| model | pieces | library | APGD-CE | APGD-T | FAB-T | Square |")
    print("| --- | ---: | --- | --- | --- | --- | --- |")
    models: dict[str, list[dict[str, Any]]] = {}
    for (model, _), group in sorted(groups.items()):
        models.setdefault(model, []).extend(group)
    for model, group in [*models.items(), ("all", rows)]:
        for label in ("arbibench", "reference"):
            sums = [[0, 0] for _ in range(4)]
            for r in group:
                comps = (r["arbibench"]["components"] + [r["arbibench"]["square_variants"]["configured"]["square"]]
                         if label == "arbibench" else r["reference"]["components"])
                for k, c in enumerate(comps):
                    sums[k][0] += c["images"]
                    sums[k][1] += c["fooled"]
            print(f"| {model} | {len(group)} | {label} | " + " | ".join(f"{a} / {f}" for a, f in sums) + " |")


def _summary(out: Path) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    if not rows:
        raise SystemExit(f"no piece files in {out}: run without --summary first")
    print("| model | eps | seed | clean | arbibench robust | with the other Square schedule | reference robust | "
          "only arbibench robust | only reference robust | arbibench s | reference s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        ours = r["arbibench"]["square_variants"]
        conf, flip = ours["configured"], ours.get("flipped")
        other = "-" if flip is None else f"{flip['robust']} (rescale={flip['rescale_schedule']})"
        ref = r["reference"]
        ours_robust, ref_robust = _robust(r)
        only_ours = sum(a and not b for a, b in zip(ours_robust, ref_robust, strict=True))
        only_ref = sum(b and not a for a, b in zip(ours_robust, ref_robust, strict=True))
        grad_s = sum(c["seconds"] for c in r["arbibench"]["components"])
        print(f"| {r['model']} | {r['eps']} | {r['seed']} | {sum(r['correct'])} | {conf['robust']} "
              f"(rescale={conf['rescale_schedule']}) | "
              f"{other} | "
              f"{ref['robust']} | {only_ours} | {only_ref} | {grad_s + conf['square']['seconds']:.0f} | "
              f"{ref['seconds']:.0f} |")
    print("\nPer component (images attacked / fooled):")
    print("| model | eps | seed | library | APGD-CE | APGD-T | FAB-T | Square |")
    print("| --- | --- | ---: | --- | --- | --- | --- | --- |")
    for r in rows:
        ours = r["arbibench"]["components"] + [r["arbibench"]["square_variants"]["configured"]["square"]]
        for label, comps in (("arbibench", ours), ("reference", r["reference"]["components"])):
            cells = " | ".join(f"{c['images']} / {c['fooled']}" for c in comps)
            print(f"| {r['model']} | {r['eps']} | {r['seed']} | {label} | {cells} |")
    _aggregate(rows)


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
    for model_name in args.models.split(","):
        for eps_text in args.eps.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                path = args.out / f"{model_name}_eps{eps_text.replace('/', '-')}_seed{seed}.json"
                if path.exists():
                    print(f"{path.name}: done, kept")
                    continue
                t0 = time.perf_counter()
                _piece(model_name, eps_text, seed, args, path)
                print(f"{path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    _summary(args.out)


if __name__ == "__main__":
    main()
