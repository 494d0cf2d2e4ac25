"""How far a protocol run over a store has come: batches done of the total, and the hours left at the measured cost.

A full-protocol card takes tens of CPU hours, spread over sessions and machines; any session must be able to say where
it stands without running anything. The run's evaluations are planned exactly as ``protocol run`` plans them
(:func:`arbibench.protocol.run.plan_model`), so each store key is the one the run writes, and the store says which
of its batches are committed and how many seconds each took. The hours left are a CPU queue's: a batch a lent GPU
computed counts as done, and its seconds (another clock) price nothing.

The eps* search has no hours left: each radius attacks the images the previous radii left, so its size is not known in
advance. Where it stands is found by replaying it on the store (:func:`eps_star_progress`): every radius it has
finished is read back, and the first one the store lacks is the one the run computes now. A ``--certify`` run then
certifies each eps* image, committing one certificate at a time: those in the store are counted, and the images left
are priced at the mean seconds of the ones done.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from rich.console import Console
from rich.progress import Progress

from arbibench.attacks import BLACK_BOX
from arbibench.evaluation.min_perturbation import LogGrid
from arbibench.evaluation.plan import EvalPlan
from arbibench.evaluation.store import ResultStore
from arbibench.evaluation.stored_only import MissingResultsError, StoredOnlyExecutor
from arbibench.inference import Inference
from arbibench.machine import on_gpu
from arbibench.models.zoo import load_model
from arbibench.operations.projection import per_image_seconds, quick_card
from arbibench.protocol.certified import stored_certificates
from arbibench.protocol.presets import Protocol, get_protocol
from arbibench.protocol.run import ModelPlan, model_eps_star, plan_model, protocol_subsets, run_settings


@dataclass
class EvaluationProgress:
    """One store evaluation of the run: a clean pass or an attack on one family's images or one sweep eps."""

    label: str
    batches: int
    done: int
    seconds: float  # stored seconds of the done batches
    attack: str | None = None  # the attack's name ("clean" for a clean pass): evaluations of one attack cost alike
    samples: int = 0  # images of the evaluation
    samples_done: int = 0  # images of its done batches
    # the dearest cost per image of the same evaluation (same images, attack, budget and eps) on other models of the
    # store: how an attack this run has not reached costs on this machine
    elsewhere_per_sample: float | None = None
    # what an image cost this model on its own quick card, at this run's budget (black-box: the whole budget, the
    # high end): how this model differs from the others (an adversarially trained one keeps its images for the whole
    # of AutoAttack, several times a standard one's cost)
    card_per_sample: float | None = None
    # of the done batches, those a GPU computed (a lent one, seeding the store): done, but their seconds price
    # nothing the CPU queue has left, so every cost below is read on the other batches alone
    gpu_done: int = 0
    gpu_seconds: float = 0.0
    gpu_samples: int = 0

    @property
    def cpu_seconds(self) -> float:
        return self.seconds - self.gpu_seconds

    @property
    def cpu_samples(self) -> int:
        return self.samples_done - self.gpu_samples

    @property
    def per_batch(self) -> float | None:
        """Seconds per batch on a CPU (None: no batch computed on one)."""
        n = self.done - self.gpu_done
        return self.cpu_seconds / n if n else None

    @property
    def per_sample(self) -> float | None:
        """Seconds per image on a CPU (None: no batch computed on one)."""
        return self.cpu_seconds / self.cpu_samples if self.cpu_samples else None


@dataclass(frozen=True)
class EpsStarProgress:
    """Where a model's eps* search stands in its store (:func:`eps_star_progress`)."""

    state: str  # "done", "searching" or "not started"
    seconds: float  # CPU seconds of the search's stored batches
    radius: float | None = None  # the radius the run computes now (None: done)
    attack: str | None = None  # the attack it runs there (the random corners come first at every radius)
    images: int | None = None  # the images attacked at that radius
    phase: str | None = None  # "descent" (radii from eps_max down, each once) or "bisection" (the rounds after it)
    step: int | None = None  # the radius's place in the descent, largest first (1-based); None in the bisection
    steps: int | None = None  # the descent's radii

    def describe(self) -> str:
        """One line for a table: "done", "not started", or the radius the run computes now."""
        if self.state != "searching" or self.radius is None:
            return self.state
        where = f"descent {self.step} of {self.steps}" if self.phase == "descent" else "bisection"
        images = "1 image" if self.images == 1 else f"{self.images} images"
        return f"{where}: {self.attack} on {images} at {self.radius * 255:.3g}/255"

    def to_json(self) -> dict[str, object]:
        return {"state": self.state, "summary": self.describe(), "hours_so_far": round(self.seconds / 3600, 4),
                "radius": self.radius, "attack": self.attack, "images": self.images, "phase": self.phase,
                "step": self.step, "steps": self.steps}


@dataclass(frozen=True)
class CertificationProgress:
    """Where a ``--certify`` run's certificates stand: one per eps* image, each committed as it finishes."""

    done: int
    total: int
    seconds: float  # the verifier's seconds of the certificates done (the run's clock)

    def seconds_left(self) -> float | None:
        """The images left at the mean seconds of those done (None: none done, nothing to price them by)."""
        if self.done >= self.total:
            return 0.0
        return None if not self.done else (self.total - self.done) * self.seconds / self.done

    def describe(self) -> str:
        return "done" if self.done >= self.total else f"{self.done} of {self.total} images certified"

    def to_json(self) -> dict[str, object]:
        left = self.seconds_left()
        hours_left = None if left is None else round(left / 3600, 4)
        return {"done": self.done, "total": self.total, "summary": self.describe(),
                "hours_so_far": round(self.seconds / 3600, 4), "hours_left": hours_left}


@dataclass
class ProtocolProgress:
    """A model's protocol run: every planned evaluation with its committed batches, and its eps* search (None: the
    run has none)."""

    model_name: str
    protocol: str
    evaluations: list[EvaluationProgress] = field(default_factory=list)
    eps_star: EpsStarProgress | None = None
    certification: CertificationProgress | None = None  # None: the run certifies nothing

    @property
    def batches(self) -> int:
        return sum(e.batches for e in self.evaluations)

    @property
    def done(self) -> int:
        return sum(e.done for e in self.evaluations)

    @property
    def hours_so_far(self) -> float:
        """Hours of the batches a CPU computed, the eps* search's included: the queue's clock (a GPU's batches are
        counted in :attr:`gpu_done`)."""
        search = 0.0 if self.eps_star is None else self.eps_star.seconds
        verifier = 0.0 if self.certification is None else self.certification.seconds
        return (sum(e.cpu_seconds for e in self.evaluations) + search + verifier) / 3600

    @property
    def gpu_done(self) -> int:
        return sum(e.gpu_done for e in self.evaluations)

    def hours_left(self) -> tuple[float, int]:
        """(projected hours, evaluations with no measured batch yet): the sum of :meth:`seconds_left`, counting the
        evaluations it cannot price."""
        left = self.seconds_left()
        if self.certification is not None:
            left.append(self.certification.seconds_left())
        return sum(s for s in left if s is not None) / 3600, sum(s is None for s in left)

    def seconds_left(self) -> list[float | None]:
        """Each evaluation's projected seconds (None: nothing measured to price it): its remaining batches at its own
        measured cost per batch; one not started yet at the dearer of the dearest cost per image of the same
        evaluation on another model of the store (the same images and budget: a black-box attack this run has not
        reached, an eps of the sweep, where small eps cost several times more than large) and this model's own quick
        card's cost per image (another machine perhaps, but this model), else at the cost per image of the same attack
        measured on other images of this run (the eps sweep's APGD-CE at the white-box APGD-CE's), else at the dearest
        cost per batch measured in this run (a bound, not a guess: attacks differ by orders of magnitude, so an
        unknown one is counted as the slowest seen)."""
        measured = [e.per_batch for e in self.evaluations if e.per_batch is not None]
        fallback = max(measured, default=None)
        by_attack: dict[str, list[EvaluationProgress]] = {}
        for e in self.evaluations:
            if e.attack is not None and e.cpu_samples:
                by_attack.setdefault(e.attack, []).append(e)
        out: list[float | None] = []
        for e in self.evaluations:
            left = e.batches - e.done
            cost = e.per_batch
            priced = [c for c in (e.elsewhere_per_sample, e.card_per_sample) if c is not None]
            if left and cost is None and priced:
                cost = max(priced) * e.samples / e.batches
            if left and cost is None and e.attack in by_attack and e.samples:
                same = by_attack[e.attack]
                per_sample = sum(o.cpu_seconds for o in same) / sum(o.cpu_samples for o in same)
                cost = per_sample * e.samples / e.batches
            if left and cost is None:
                cost = fallback
            out.append(0.0 if not left else None if cost is None else left * cost)
        return out

    def parts(self) -> dict[str, tuple[float, float]]:
        """(hours so far, projected hours left) per part of the run: white-box, black-box and the eps sweep (the
        part is the label's prefix), the check of a projection against a finished run."""
        totals: dict[str, list[float]] = {}
        for e, left in zip(self.evaluations, self.seconds_left(), strict=True):
            part = "sweep" if e.label.startswith("sweep") else e.label.split(":")[0]
            t = totals.setdefault(part, [0.0, 0.0])
            t[0] += e.cpu_seconds / 3600
            t[1] += (left or 0.0) / 3600
        return {k: (v[0], v[1]) for k, v in totals.items()}


def protocol_progress(
    protocol: Protocol,
    model_name: str,
    store: ResultStore,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    inference: Inference | str = Inference.SIMULATION,
    model_info: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    sweep: bool = True,
) -> ProtocolProgress:
    """Plan ``model_name`` under ``protocol`` as ``protocol run`` does and read each evaluation's batches from
    ``store`` (nothing is computed; the store gains only the schema if it is new), then replay its eps* search on
    the store. For a full run, the model's quick card in ``model_info`` (where there is one) also prices the attacks
    the run has not reached. ``sweep=False`` counts a run without its eps sweep and eps* (``--no-sweep``)."""
    model = load_model(model_name, model_dir, dataset=protocol.dataset)
    card_costs = _card_costs(protocol, model_name, model_info)
    plan = plan_model(model, model_name, protocol, store, protocol_subsets(protocol, data_dir),
                      settings=run_settings(protocol, inference=inference), data_dir=data_dir, sweep=sweep)
    out = ProtocolProgress(model_name, protocol.label)
    seen: set[str] = set()  # the sweep's clean passes are one evaluation: the same images, whatever the eps
    for family, ev in [*plan.families.items(), *((f"sweep eps={p.ctx.threat.eps:.4g}", p) for p in plan.sweep)]:
        ctx = ev.ctx
        n_batches = math.ceil(len(ctx.y) / ctx.batch_size)
        for attack in (None, *ev.attacks):
            key = ctx.store_key(attack)
            if key in seen:
                continue
            seen.add(key)
            every, gpu = _batch_totals(store, key)
            name = "clean" if attack is None else attack.name
            out.evaluations.append(EvaluationProgress(
                f"{family}: {name}", n_batches, every[0], every[1], attack=name, samples=len(ctx.y),
                samples_done=every[2], elsewhere_per_sample=_elsewhere_per_sample(store, key, ctx.spec(attack)),
                card_per_sample=card_costs.get((family, name)), gpu_done=gpu[0], gpu_seconds=gpu[1],
                gpu_samples=gpu[2],
            ))
    if sweep:
        out.eps_star = eps_star_progress(plan, store, exclude=seen)
        out.certification = certification_progress(plan, store)
    return out


def certification_progress(plan: ModelPlan, store: ResultStore) -> CertificationProgress | None:
    """How many of the eps* images of a ``--certify`` run ``store`` holds certificates for; None where the run
    certifies nothing."""
    protocol = plan.protocol
    if not (protocol.eps_star_certify and protocol.eps_star_attacks and BLACK_BOX in plan.subsets):
        return None
    _, _, idx = plan.subsets[BLACK_BOX]
    done = stored_certificates(plan.model, idx.numpy(), store, semantics=plan.settings.inference)
    return CertificationProgress(len(done), len(idx), sum(float(r.get("seconds", 0.0)) for r in done.values()))


class _Replay(StoredOnlyExecutor):
    """The store-only executor of a replay: refuses to compute, and keeps the store keys of every radius the search
    planned and the plan of the first radius the store lacks."""

    def __init__(self) -> None:
        self.keys: dict[str, None] = {}  # in the order planned, each once
        self.waiting: EvalPlan | None = None

    def run(self, plans: Sequence[EvalPlan], progress: Progress) -> None:
        for plan in plans:
            self.keys.update((plan.ctx.store_key(a), None) for a in (None, *plan.attacks))
        try:
            super().run(plans, progress)
        except MissingResultsError:
            self.waiting = plans[0]
            raise


def eps_star_progress(plan: ModelPlan, store: ResultStore, *, exclude: Iterable[str] = ()) -> EpsStarProgress | None:
    """Where the eps* search of ``plan`` stands in ``store``, by running the search with an executor that computes
    nothing: each finished radius is read back (the search is deterministic given its stored outcomes), and the first
    radius the store lacks stops it. None where the protocol searches no eps*. ``exclude``: store keys that belong to
    the run's other evaluations (a radius may coincide with one), whose seconds are counted there."""
    replay = _Replay()
    # a replay reads the search back and computes nothing: certification_progress counts the certificates instead
    searched_only = replace(plan, protocol=replace(plan.protocol, eps_star_certify=False))
    found = model_eps_star(searched_only, Console(quiet=True), False, replay)
    if found is None and replay.waiting is None:
        return None
    skip = set(exclude)
    totals = [_batch_totals(store, key) for key in replay.keys if key not in skip]
    seconds = sum(every[1] - gpu[1] for every, gpu in totals)
    if replay.waiting is None:
        return EpsStarProgress("done", seconds)
    protocol, ctx = plan.protocol, replay.waiting.ctx
    grid = LogGrid(protocol.eps_star_factor * protocol.eps, protocol.eps_star_floor, protocol.eps_star_rounds)
    descent = grid.descent_positions()
    position = round(grid.position(ctx.threat.eps))
    in_descent = position in descent and math.isclose(grid.radius(position), ctx.threat.eps, rel_tol=1e-6)
    started = any(every[0] for every, _ in totals)
    return EpsStarProgress(
        "searching" if started else "not started", seconds, radius=ctx.threat.eps,
        attack=replay.waiting.attacks[0].name if replay.waiting.attacks else "clean", images=len(ctx.y),
        phase="descent" if in_descent else "bisection", step=descent.index(position) + 1 if in_descent else None,
        steps=len(descent),
    )


def progress_json(p: ProtocolProgress) -> dict[str, object]:
    """One model's progress as plain JSON values (``protocol progress --json``): the totals and every evaluation,
    so a script that watches a run reads the counts without parsing a table."""
    hours, unknown = p.hours_left()
    return {
        "model": p.model_name, "protocol": p.protocol, "batches": p.batches, "done": p.done, "gpu_done": p.gpu_done,
        "hours_so_far": round(p.hours_so_far, 4), "hours_left": round(hours, 4), "not_started": unknown,
        "eps_star": None if p.eps_star is None else p.eps_star.to_json(),
        "certification": None if p.certification is None else p.certification.to_json(),
        "evaluations": [
            {"label": e.label, "attack": e.attack, "batches": e.batches, "done": e.done, "gpu_done": e.gpu_done,
             "samples": e.samples, "seconds": round(e.cpu_seconds, 3),
             "hours_left": None if left is None else round(left / 3600, 4)}
            for e, left in zip(p.evaluations, p.seconds_left(), strict=True)
        ],
    }


def _card_costs(protocol: Protocol, model_name: str, model_info: str | os.PathLike[str] | None
                ) -> dict[tuple[str, str], float]:
    """(family, attack) -> seconds per image at ``protocol``'s budgets (the high end) from the model's quick card;
    empty for a quick run (its own batches price it), or where the model has no quick card."""
    if model_info is None or protocol.quick:
        return {}
    card = quick_card(model_info, model_name, protocol.name)
    quick = get_protocol(protocol.name, quick=True)
    if card is None or not isinstance(quick, Protocol):
        return {}
    return {(family, attack): high for attack, (family, _, high) in per_image_seconds(card, protocol, quick).items()}


_BATCHES = ("SELECT b.eval_key, b.seconds, b.n_samples, m.machine FROM batches b "
            "LEFT JOIN batch_machines m USING (eval_key, batch_index) ")


def _batch_totals(store: ResultStore, key: str) -> tuple[tuple[int, float, int], tuple[int, float, int]]:
    """(batches, seconds, images) of the evaluation ``key``'s stored batches, and the same of those a GPU computed."""
    rows = store.conn.execute(_BATCHES + "WHERE b.eval_key = ?", (key,)).fetchall()
    gpu = [r for r in rows if on_gpu(r[3])]
    return ((len(rows), float(sum(r[1] for r in rows)), int(sum(r[2] for r in rows))),
            (len(gpu), float(sum(r[1] for r in gpu)), int(sum(r[2] for r in gpu))))


def _elsewhere_per_sample(store: ResultStore, key: str, spec: dict[str, object]) -> float | None:
    """The dearest cost per image on a CPU among the other models' evaluations with this ``spec`` (the store keeps
    each evaluation's spec as sorted JSON beside its key), None where no other model has a CPU batch of it."""
    rows = store.conn.execute(
        _BATCHES + "WHERE b.eval_key IN (SELECT eval_key FROM evaluations WHERE spec = ? AND eval_key != ?)",
        (json.dumps(spec, sort_keys=True), key),
    ).fetchall()
    totals: dict[str, list[float]] = {}
    for eval_key, seconds, samples, machine in rows:
        if not on_gpu(machine):
            t = totals.setdefault(eval_key, [0.0, 0.0])
            t[0] += seconds
            t[1] += samples
    costs = [seconds / samples for seconds, samples in totals.values() if samples]
    return max(costs, default=None)
