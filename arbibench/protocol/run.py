"""Running a protocol preset over models: every (model, attack) pair through the store, then the ARBiBench summary.

Each family runs on its own subset (white-box on the white-box images, black-box on the black-box images, drawn
from the former), so each family's ACC_norm divides by the clean accuracy on its own images. RS is summed per
family and over all attacks; the worst case over *all* attacks is taken on the black-box images, where both
families have outcomes. A gradient-free attack that beats every gradient attack on the same images raises the
``gradient_free_stronger`` flag. Everything goes through the result store, so a rerun skips finished batches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.attacks import BLACK_BOX, WHITE_BOX, Transfer, get_attack, get_threat_model, parse_eps
from arbibench.clock import active_clock
from arbibench.data.datasets import load_dataset
from arbibench.data.subsets import select_indices
from arbibench.evaluation.cards import checkpoint_sha256
from arbibench.evaluation.checks import gradient_free_beats_gradient
from arbibench.evaluation.executors import Executor
from arbibench.evaluation.findings import PairedOutcomes, TwinComparison, column_findings, twin_findings
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.metrics import RobustnessReport, compute_report, robustness_score_mean
from arbibench.evaluation.min_perturbation import MinimalPerturbation, search_eps_star
from arbibench.evaluation.plan import EvalPlan, computed_by, plan_evaluation
from arbibench.evaluation.result import format_eps, query_summary
from arbibench.evaluation.runner import Evaluation, execute, make_progress
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import ResultStore, hash_indices
from arbibench.evaluation.stored_only import MissingResultsError, StoredOnlyExecutor
from arbibench.evaluation.surrogates import resolve_surrogate
from arbibench.inference import Inference
from arbibench.models.zoo import ZOO, fp_twin_name, get_entry, load_model
from arbibench.protocol.certified import attach_certificates
from arbibench.protocol.presets import ACCESS_GROUPS, Protocol

ALL = "all"


@dataclass
class AttackOutcome:
    name: str
    family: str
    acc_star: float
    acc_norm: float
    interval: tuple[float, float]
    n_examples: int
    median_queries: float | None
    seconds: float


class SweepRow(TypedDict):
    """Robust accuracy of one attack at one eps of a sweep (ratios; ``interval`` is ACC*'s 95% interval)."""

    attack: str
    eps: float
    eps_text: str
    acc_star: float
    acc_norm: float
    interval: list[float]
    n_examples: int


@dataclass
class ModelEvaluation:
    """One model under one protocol: per-attack results, per-family and overall scores, flags."""

    model_name: str
    protocol: Protocol
    clean_acc: dict[str, float]  # per family, on that family's images
    clean_interval: dict[str, tuple[float, float]]
    attacks: list[AttackOutcome]
    rs: dict[str, float]
    rs_mean: dict[str, float]
    worst_case: dict[str, float]
    flags: dict[str, str]
    indices_hash: dict[str, str]
    n_examples: dict[str, int]
    sweep: list[SweepRow] = field(default_factory=list)
    seconds: float = 0.0
    min_perturbation: MinimalPerturbation | None = None  # eps* on the black-box images
    checkpoint_sha256: str | None = None  # of the checkpoint file measured
    inference: Inference = Inference.SIMULATION  # the network whose answers count
    machine: str | None = None  # what computed the batches (arbibench.machine.provenance: each one's share if several)
    # per-image outcomes by setting (each family, and "sweep <attack>" over its eps values), for paired comparisons
    # with the FP twin; kept in memory only (the store holds them)
    per_image: dict[str, PairedOutcomes] = field(default_factory=dict, repr=False)

    def family(self, family: str) -> list[AttackOutcome]:
        return [a for a in self.attacks if a.family == family]

    @property
    def eps_star(self) -> dict[str, Any] | None:
        """The eps* summary (:meth:`MinimalPerturbation.to_dict`), None when the search did not run."""
        return None if self.min_perturbation is None else self.min_perturbation.to_dict()


Subsets = dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def protocol_subsets(protocol: Protocol, data_dir: str | os.PathLike[str] | None) -> Subsets:
    """(x, y, dataset indices) of the white-box images and of the black-box images drawn from them."""
    xw, yw, iw = load_dataset(protocol.dataset, protocol.n_white_box, data_dir, None)
    pos = torch.from_numpy(select_indices(len(yw), protocol.n_black_box, seed=protocol.subset_seed))
    return {WHITE_BOX: (xw, yw, iw), BLACK_BOX: (xw[pos], yw[pos], iw[pos])}


@dataclass
class ModelPlan:
    """Every evaluation of one model under a protocol, planned once (:func:`plan_model`): one per attack family on
    its subset, one per eps of the sweep. An executor computes them all; :func:`execute_model` reads them back."""

    model: nn.Module
    model_name: str
    protocol: Protocol
    subsets: Subsets
    families: dict[str, EvalPlan]
    sweep: list[EvalPlan]
    settings: RunSettings  # what every plan above was planned with (run_settings)
    checkpoint_sha256: str | None = None

    @property
    def plans(self) -> list[EvalPlan]:
        return [*self.families.values(), *self.sweep]


def run_settings(
    protocol: Protocol, *, device: str | torch.device | None = None, inference: Inference | str = Inference.SIMULATION,
    pool: bool = True,
) -> RunSettings:
    """The settings of a run of ``protocol``: its dataset, seed and batch size, with the run's device, inference and
    pooling."""
    return RunSettings(dataset=protocol.dataset, seed=protocol.seed, batch_size=protocol.batch_size, device=device,
                       inference=Inference.parse(inference), pool=pool)


def check_settings(protocol: Protocol, settings: RunSettings) -> None:
    """One ValueError when ``settings`` disagree with ``protocol`` on what it fixes (build them with
    :func:`run_settings`)."""
    fixed = run_settings(protocol)
    for name in ("dataset", "seed", "batch_size"):
        if getattr(settings, name) != getattr(fixed, name):
            raise ValueError(f"settings.{name} = {getattr(settings, name)!r}, but the protocol {protocol.name} fixes "
                             f"{getattr(fixed, name)!r}; build the settings with run_settings(protocol, ...)")


def plan_model(
    model: nn.Module,
    model_name: str,
    protocol: Protocol,
    store: ResultStore,
    subsets: Subsets,
    *,
    settings: RunSettings,
    sweep: bool = True,
    data_dir: str | os.PathLike[str] | None = None,
    checkpoint_sha256: str | None = None,
) -> ModelPlan:
    """Plan every evaluation of ``model`` under ``protocol`` with the run's ``settings`` (:func:`run_settings`):
    inputs and model checked once, store keys fixed."""
    check_settings(protocol, settings)
    threat = get_threat_model(protocol.threat_model, protocol.eps, protocol.grid)
    families = {}
    for group in ACCESS_GROUPS:
        specs = protocol.white_box if group == WHITE_BOX else protocol.black_box
        if specs:
            x, y, idx = subsets[group]
            families[group] = plan_evaluation(
                model, x, y, idx, attacks=[get_attack(s.name, **s.kwargs) for s in specs], threat=threat,
                settings=settings, model_name=model_name, store=store,
            )
    sweep_plans: list[EvalPlan] = []
    if sweep and protocol.sweep_eps:
        x, y, idx = load_dataset(protocol.dataset, protocol.n_sweep, data_dir, None)
        sweep_plans = plan_sweep(
            model, model_name, x, y, idx, protocol.sweep_attack, protocol.threat_model,
            [parse_eps(e) for e in protocol.sweep_eps], store, settings=settings, grid=protocol.grid,
        )
    return ModelPlan(model, model_name, protocol, subsets, families, sweep_plans, settings, checkpoint_sha256)


def model_eps_star(plan: ModelPlan, console: Console | None, progress: bool,
                   executor: Executor | None) -> MinimalPerturbation | None:
    """eps* on the black-box images (None where the protocol has none). A report that reads the store only
    (:class:`StoredOnlyExecutor`) over a store without this search's rows (one written before it) gets None and a
    note: the rest of the model's results stand, and `protocol run` adds eps* to the store."""
    protocol = plan.protocol
    if not (protocol.eps_star_attacks and BLACK_BOX in plan.subsets and plan.families):
        return None
    x, y, idx = plan.subsets[BLACK_BOX]
    ctx = next(iter(plan.families.values())).ctx
    try:
        found = search_eps_star(
            plan.model, x, y, idx, attacks=protocol.eps_star_attacks, threat_model=protocol.threat_model,
            eps_max=protocol.eps_star_factor * protocol.eps, search_rounds=protocol.eps_star_rounds,
            eps_floor=protocol.eps_star_floor, probe_draws=protocol.eps_star_draws, store=ctx.store,
            settings=plan.settings, model_name=plan.model_name, progress=progress, console=console, executor=executor,
            grid=protocol.grid,
        )
        if protocol.eps_star_certify:
            attach_certificates(found, plan.model, x, y, semantics=plan.settings.inference, device=ctx.device,
                                console=console if progress else None, store=ctx.store, model_name=plan.model_name)
        return found
    except MissingResultsError:
        if not isinstance(executor, StoredOnlyExecutor):
            raise
        (console or Console(stderr=True)).print(
            f"[yellow]note[/]: {plan.model_name}: eps* is not in {ctx.store.path} (a store written before the "
            "descent search); reported without it. `arbibench protocol run` with this --store adds it."
        )
        return None


def execute_model(
    plan: ModelPlan, *, console: Console | None = None, progress: bool = True, backend: Executor | None = None,
    sweep: bool = True,
) -> ModelEvaluation:
    """Carry out ``plan`` (its batches computed by ``backend`` first when given), then score it: per-family and
    overall RS, worst cases, the gradient-free check across families, eps* and the sweep."""
    t0 = active_clock().now()
    protocol = plan.protocol
    if backend is not None:
        with make_progress(console, progress) as bar:
            backend.run(plan.plans, bar)
    flags: dict[str, str] = {}
    runs: dict[str, Evaluation] = {}
    for family, family_plan in plan.families.items():
        # the model checks run once, on the white-box family; the cross-family check is in _scores
        runs[family] = execute(family_plan, progress=progress, console=console, checks=family == WHITE_BOX)
        flags.update(runs[family].flags)
    attacks, reports = _attack_outcomes(runs)
    rs, rs_mean, worst = _scores(plan, runs, reports, attacks, flags)
    eps_star = model_eps_star(plan, console, progress, backend) if sweep else None
    per_image = {f: PairedOutcomes(r.clean.clean_correct, {n: o.adv_correct for n, o in r.outcomes.items()})
                 for f, r in runs.items()}
    sweep_rows: list[SweepRow] = []
    if plan.sweep:
        sweep_rows, per_image[f"sweep {protocol.sweep_attack}"] = execute_sweep(plan.sweep, console=console,
                                                                                progress=progress)
    return ModelEvaluation(
        model_name=plan.model_name,
        protocol=protocol,
        clean_acc={f: r.acc for f, r in reports.items()},
        clean_interval={f: r.acc_interval for f, r in reports.items()},
        attacks=attacks,
        rs=rs,
        rs_mean=rs_mean,
        worst_case=worst,
        flags=flags,
        indices_hash={f: hash_indices(plan.subsets[f][2]) for f in runs},
        n_examples={f: len(plan.subsets[f][2]) for f in runs},
        sweep=sweep_rows,
        seconds=active_clock().now() - t0,
        min_perturbation=eps_star,
        checkpoint_sha256=plan.checkpoint_sha256,
        inference=plan.settings.inference,
        machine=computed_by(plan.plans, elsewhere=backend is not None),
        per_image=per_image,
    )


def _attack_outcomes(runs: dict[str, Evaluation]) -> tuple[list[AttackOutcome], dict[str, RobustnessReport]]:
    """Each family's report, and every attack's row (family, ACC*, ACC_norm, interval, queries, seconds)."""
    attacks: list[AttackOutcome] = []
    reports: dict[str, RobustnessReport] = {}
    for family, run in runs.items():
        reports[family] = report = compute_report(run.clean.clean_correct,
                                                  {n: o.adv_correct for n, o in run.outcomes.items()})
        attacks += [
            AttackOutcome(m.attack, family, m.acc_star, m.acc_norm, m.interval, m.n,
                          query_summary(run.outcomes[m.attack])["median_queries"], run.seconds.get(m.attack, 0.0))
            for m in report.attacks
        ]
    return attacks, reports


def _scores(
    plan: ModelPlan, runs: dict[str, Evaluation], reports: dict[str, RobustnessReport], attacks: list[AttackOutcome],
    flags: dict[str, str],
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """RS, RS_mean and worst case per family and over all attacks; adds the gradient-free flag to ``flags``."""
    rs = {f: r.rs for f, r in reports.items()}
    rs_mean = {f: r.rs_mean for f, r in reports.items()}
    worst = {f: r.worst_case_acc for f, r in reports.items()}
    norms = [a.acc_norm for a in attacks]
    rs[ALL] = float(sum(rs.values()))
    rs_mean[ALL] = robustness_score_mean(norms) if norms else 0.0
    if WHITE_BOX in runs and BLACK_BOX in runs:
        worst[ALL], acc_black = _worst_case_on_black_box(runs, plan.subsets)
        # against the attacks that follow gradients only: AutoAttack holds Square, so it beats a masked model too
        gradient_only = [a.name for a in plan.families[WHITE_BOX].attacks if a.gradient_only]
        free = gradient_free_beats_gradient(acc_black, [a.name for a in attacks if a.family == BLACK_BOX],
                                            gradient_only)
        if free is not None:
            flags[free.name] = free.message
    return rs, rs_mean, worst


def run_model(
    model: nn.Module,
    model_name: str,
    protocol: Protocol,
    store: ResultStore,
    subsets: Subsets,
    *,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    sweep: bool = True,
    data_dir: str | os.PathLike[str] | None = None,
    backend: Executor | None = None,
    pool: bool = True,
    checkpoint_sha256: str | None = None,
    inference: Inference | str = Inference.SIMULATION,
) -> ModelEvaluation:
    """Evaluate one model under every attack of ``protocol`` (resumable through ``store``; ``backend`` computes
    the store batches elsewhere, e.g. on a Ray cluster, with the same rows): :func:`plan_model`, then
    :func:`execute_model`.

    ``pool=False`` runs the black-box store batches one after the other instead of side by side (``pool`` of
    :func:`~arbibench.evaluation.runner.evaluate`); the stored rows are the same either way."""
    settings = run_settings(protocol, device=device, inference=inference, pool=pool)
    plan = plan_model(model, model_name, protocol, store, subsets, settings=settings, sweep=sweep, data_dir=data_dir,
                      checkpoint_sha256=checkpoint_sha256)
    return execute_model(plan, console=console, progress=progress, backend=backend, sweep=sweep)


def _worst_case_on_black_box(runs: dict[str, Evaluation], subsets: Subsets) -> tuple[float, dict[str, float]]:
    """Worst case over all attacks on the black-box images, and every attack's ACC* on those images."""
    white_idx = subsets[WHITE_BOX][2].numpy()
    black_idx = subsets[BLACK_BOX][2].numpy()
    pos = np.searchsorted(white_idx, black_idx)
    if not np.array_equal(white_idx[pos], black_idx):
        raise RuntimeError("the black-box images are not a subset of the white-box images")
    robust = runs[BLACK_BOX].clean.clean_correct.copy()
    acc: dict[str, float] = {}
    for group in ACCESS_GROUPS:
        for name, out in runs[group].outcomes.items():
            adv = out.adv_correct[pos] if group == WHITE_BOX else out.adv_correct
            acc[name] = float(adv.mean())
            robust &= adv
    return float(robust.mean()), acc


def sweep_eps(*args: Any, **kwargs: Any) -> list[SweepRow]:
    """One row per eps: ACC* and ACC_norm of ``attack`` (each eps its own stored evaluation); the arguments of
    :func:`sweep_outcomes`."""
    return sweep_outcomes(*args, **kwargs)[0]


def plan_sweep(
    model: nn.Module,
    model_name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor,
    attack: str,
    threat_model: str,
    eps_values: Sequence[float],
    store: ResultStore,
    *,
    settings: RunSettings,
    grid: str = "float",
) -> list[EvalPlan]:
    """One planned evaluation of ``attack`` per eps, on the same images (and input ``grid``), under ``settings``."""
    return [
        plan_evaluation(model, x, y, indices, attacks=[attack], threat=get_threat_model(threat_model, eps, grid),
                        settings=settings, model_name=model_name, store=store)
        for eps in eps_values
    ]


def execute_sweep(
    plans: Sequence[EvalPlan], *, console: Console | None = None, progress: bool = True,
    backend: Executor | None = None,
) -> tuple[list[SweepRow], PairedOutcomes]:
    """The rows of a planned sweep (ACC* and ACC_norm per eps) and the per-image outcomes, one column per eps
    (named by its text, e.g. "8/255"); ``backend`` computes all the eps' batches together first."""
    if backend is not None:
        with make_progress(console, progress) as bar:
            backend.run(plans, bar)
    rows: list[SweepRow] = []
    clean_correct, columns = np.zeros(0, bool), {}
    for plan in plans:
        clean, outs, _, _ = execute(plan, progress=progress, console=console, checks=False)
        m = compute_report(clean.clean_correct, {n: o.adv_correct for n, o in outs.items()}).attacks[0]
        eps = plan.ctx.threat.eps
        clean_correct = clean.clean_correct
        columns[format_eps(eps)] = outs[m.attack].adv_correct
        rows.append(SweepRow(attack=m.attack, eps=float(eps), eps_text=format_eps(eps), acc_star=m.acc_star,
                             acc_norm=m.acc_norm, interval=list(m.interval), n_examples=m.n))
    return rows, PairedOutcomes(clean_correct, columns)


def sweep_outcomes(
    model: nn.Module,
    model_name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor,
    attack: str,
    threat_model: str,
    eps_values: Sequence[float],
    store: ResultStore,
    *,
    dataset: str = "cifar10",
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    backend: Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
) -> tuple[list[SweepRow], PairedOutcomes]:
    """One row per eps (ACC* and ACC_norm of ``attack``, each eps its own stored evaluation) and the per-image
    outcomes, one column per eps: :func:`plan_sweep`, then :func:`execute_sweep`. ``inference`` names the network
    whose answers count, as for every other evaluation."""
    settings = RunSettings(dataset=dataset, seed=seed, batch_size=batch_size, device=device,
                           inference=Inference.parse(inference))
    plans = plan_sweep(model, model_name, x, y, indices, attack, threat_model, eps_values, store, settings=settings)
    return execute_sweep(plans, console=console, progress=progress, backend=backend)


def check_model_names(protocol: Protocol, models: Sequence[str], model_dir: str | os.PathLike[str] | None) -> None:
    """One ValueError for no model or a name that is not a zoo (or imported) model: before hours of work, not after."""
    if not models:
        raise ValueError("no model to evaluate: name at least one zoo model (e.g. --models resnet20_bnn)")
    for name in models:
        get_entry(name, protocol.dataset, model_dir)


def plan_zoo_model(
    name: str,
    protocol: Protocol,
    store: ResultStore,
    subsets: Subsets,
    *,
    data_dir: str | os.PathLike[str] | None,
    model_dir: str | os.PathLike[str] | None,
    settings: RunSettings,
    sweep: bool,
) -> ModelPlan:
    """:func:`plan_model` for the zoo model ``name``, loaded on the settings' device with its checkpoint's sha256."""
    model = load_model(name, model_dir, protocol.dataset, device=resolve_device(settings.device))
    return plan_model(model, name, protocol, store, subsets, settings=settings, sweep=sweep, data_dir=data_dir,
                      checkpoint_sha256=checkpoint_sha256(name, protocol.dataset, model_dir))


def run_protocol(
    protocol: Protocol,
    models: Sequence[str],
    store: ResultStore,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    sweep: bool = True,
    on_model_done: Callable[[ModelEvaluation, nn.Module], None] | None = None,
    backend: Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
) -> list[ModelEvaluation]:
    """Evaluate every zoo model in ``models`` under ``protocol``; ``on_model_done`` gets each result as it lands.

    Each model's evaluations are planned once (:func:`plan_model`). With a ``backend`` (a Ray cluster), every
    model is planned first and the store batches of all of them are computed there together, longest first; each
    model is then executed (read back from the store; the eps* search, whose rounds depend on each other, goes
    through the backend too). Without one, each model is planned and executed in turn."""
    settings = run_settings(protocol, device=resolve_device(device), inference=inference)
    check_model_names(protocol, models, model_dir)
    subsets = protocol_subsets(protocol, data_dir)

    def plan(name: str) -> ModelPlan:
        return plan_zoo_model(name, protocol, store, subsets, data_dir=data_dir, model_dir=model_dir,
                              settings=settings, sweep=sweep)

    planned: dict[str, ModelPlan] = {}
    if backend is not None:
        planned = {name: plan(name) for name in models}
        with make_progress(console, progress) as bar:
            backend.run([p for mp in planned.values() for p in mp.plans], bar)
    results = []
    for name in models:
        model_plan = planned.pop(name, None) or plan(name)
        result = execute_model(model_plan, console=console, progress=progress, backend=backend, sweep=sweep)
        results.append(result)
        if on_model_done is not None:
            on_model_done(result, model_plan.model)
    return results


def protocol_findings(results: Sequence[ModelEvaluation], *, seed: int = 0, per_column: bool = False
                      ) -> list[TwinComparison]:
    """Each BNN of ``results`` against its FP twin (when the twin is in ``results`` too): per attack family at the
    protocol eps and over the eps sweep, with paired 95% intervals and a verdict (:mod:`arbibench.evaluation.findings`).
    ``per_column``: instead, each attack and each eps of the sweep on its own (what the family rows average).
    """
    twins = {r.model_name: twin for r in results
             if r.model_name in ZOO and (twin := fp_twin_name(ZOO[r.model_name])) is not None}
    compare = column_findings if per_column else twin_findings
    return compare({r.model_name: _without_self_transfer(r) for r in results}, twins, seed=seed)


def self_transfer_attacks(result: ModelEvaluation) -> set[str]:
    """The black-box transfer attacks whose surrogate is the evaluated model itself (the FP twin's "fp_twin").

    Against its own surrogate a transfer attack is a white-box attack: comparing a BNN's transfer accuracy with its
    FP twin's would set a black-box number against a white-box one and favour the BNN, so the findings leave such
    attacks out of the twin comparison (the cards keep them, marked by the surrogate in the stored spec)."""
    names = set()
    for spec in result.protocol.black_box:
        attack = get_attack(spec.name, **spec.kwargs)
        if not isinstance(attack, Transfer):
            continue
        try:
            surrogate = resolve_surrogate(attack.config.surrogate, result.model_name)
        except ValueError:  # not a zoo model: its surrogate was named explicitly, so it is not itself
            continue
        if surrogate == result.model_name:
            names.add(attack.name)
    return names


def _without_self_transfer(result: ModelEvaluation) -> dict[str, PairedOutcomes]:
    drop = self_transfer_attacks(result)
    black = result.per_image.get(BLACK_BOX)
    if not drop or black is None:
        return result.per_image
    rest = {n: v for n, v in black.adversarial.items() if n not in drop}
    settings = {k: v for k, v in result.per_image.items() if k != BLACK_BOX}
    if rest:  # a black-box family of self-transfer only has nothing to compare
        settings[BLACK_BOX] = PairedOutcomes(black.clean, rest)
    return settings
