"""Running a protocol preset over models: every (model, attack) pair through the store, then the ARBiBench summary.

Each family runs on its own subset (white-box on the white-box images, black-box on the black-box images, drawn
from the former), so each family's ACC_norm divides by the clean accuracy on its own images. RS is summed per
family and over all attacks; the worst case over *all* attacks is taken on the black-box images, where both
families have outcomes. A gradient-free attack that beats every gradient attack on the same images raises the
``gradient_free_stronger`` flag. Everything goes through the result store, so a rerun skips finished batches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.attacks import Transfer, get_attack, get_threat_model, parse_eps
from arbibench.data.datasets import load_dataset
from arbibench.data.subsets import select_indices
from arbibench.evaluation.backends import Backend
from arbibench.evaluation.cards import checkpoint_sha256
from arbibench.evaluation.checks import gradient_free_beats_gradient
from arbibench.evaluation.findings import PairedOutcomes, TwinComparison, twin_findings
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.metrics import compute_report, robustness_score_mean
from arbibench.evaluation.min_perturbation import MinimalPerturbation, minimal_perturbation
from arbibench.evaluation.result import format_eps, query_summary
from arbibench.evaluation.runner import EvalPlan, evaluate, make_progress, prepare_evaluation
from arbibench.evaluation.store import ResultStore, hash_indices
from arbibench.evaluation.surrogates import resolve_surrogate
from arbibench.models.zoo import ZOO, fp_twin_name, get_entry, load_model
from arbibench.protocol.presets import BLACK_BOX, FAMILIES, WHITE_BOX, Protocol

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
    # per-image outcomes by setting (each family, and "sweep <attack>" over its eps values), for paired comparisons
    # with the FP twin; kept in memory only (the store holds them)
    per_image: dict[str, PairedOutcomes] = field(default_factory=dict, repr=False)

    def family(self, family: str) -> list[AttackOutcome]:
        return [a for a in self.attacks if a.family == family]

    @property
    def eps_star(self) -> dict[str, Any] | None:
        """The eps* summary (:meth:`MinimalPerturbation.to_dict`), None when the search did not run."""
        return None if self.min_perturbation is None else self.min_perturbation.to_dict()


def protocol_subsets(
    protocol: Protocol, data_dir: str | os.PathLike | None
) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, dataset indices) of the white-box images and of the black-box images drawn from them."""
    xw, yw, iw = load_dataset(protocol.dataset, protocol.n_white_box, data_dir, None)
    pos = torch.from_numpy(select_indices(len(yw), protocol.n_black_box, seed=protocol.subset_seed))
    return {WHITE_BOX: (xw, yw, iw), BLACK_BOX: (xw[pos], yw[pos], iw[pos])}


def run_model(
    model: nn.Module,
    model_name: str,
    protocol: Protocol,
    store: ResultStore,
    subsets: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    *,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    sweep: bool = True,
    data_dir: str | os.PathLike | None = None,
    backend: Backend | None = None,
    pool: bool = True,
    checkpoint_sha256: str | None = None,
) -> ModelEvaluation:
    """Evaluate one model under every attack of ``protocol`` (resumable through ``store``; ``backend`` computes
    the store batches elsewhere, e.g. on a Ray cluster, with the same rows).

    ``pool=False`` runs the black-box store batches one after the other instead of side by side (``pool`` of
    :func:`~arbibench.evaluation.runner.evaluate`); the stored rows are the same either way."""
    t0 = time.perf_counter()
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    outcomes: dict[str, dict] = {}
    flags: dict[str, str] = {}
    attacks: list[AttackOutcome] = []
    clean_acc, clean_interval, reports = {}, {}, {}
    per_image: dict[str, PairedOutcomes] = {}
    for family in FAMILIES:
        specs = protocol.white_box if family == WHITE_BOX else protocol.black_box
        if not specs:
            continue
        x, y, idx = subsets[family]
        objs = [get_attack(s.name, **s.kwargs) for s in specs]
        clean, outs, secs, fam_flags = evaluate(
            model,
            x,
            y,
            idx,
            attacks=objs,
            threat=threat,
            dataset=protocol.dataset,
            model_name=model_name,
            seed=protocol.seed,
            batch_size=protocol.batch_size,
            device=device,
            store=store,
            progress=progress,
            console=console,
            checks=family == WHITE_BOX,  # the model checks once; the cross-family check is below
            backend=backend,
            pool=pool,
        )
        flags.update(fam_flags)
        outcomes[family] = {"clean": clean, **outs}
        per_image[family] = PairedOutcomes(clean.clean_correct, {n: o.adv_correct for n, o in outs.items()})
        report = compute_report(clean.clean_correct, {n: o.adv_correct for n, o in outs.items()})
        reports[family] = report
        clean_acc[family] = report.acc
        clean_interval[family] = report.acc_interval
        for m in report.attacks:
            attacks.append(
                AttackOutcome(
                    m.attack,
                    family,
                    m.acc_star,
                    m.acc_norm,
                    m.interval,
                    m.n,
                    query_summary(outs[m.attack])["median_queries"],
                    secs.get(m.attack, 0.0),
                )
            )
    rs = {f: reports[f].rs for f in reports}
    rs_mean = {f: reports[f].rs_mean for f in reports}
    worst = {f: reports[f].worst_case_acc for f in reports}
    norms = [a.acc_norm for a in attacks]
    rs[ALL] = float(sum(rs.values()))
    rs_mean[ALL] = robustness_score_mean(norms) if norms else 0.0
    if WHITE_BOX in outcomes and BLACK_BOX in outcomes:
        worst[ALL], acc_black = _worst_case_on_black_box(outcomes, subsets)
        # against the attacks that follow gradients only: AutoAttack holds Square, so it beats a masked model too
        gradient_only = [o.name for o in (get_attack(s.name, **s.kwargs) for s in protocol.white_box)
                         if o.gradient_only]
        free = gradient_free_beats_gradient(acc_black, [a.name for a in attacks if a.family == BLACK_BOX],
                                            gradient_only)
        if free is not None:
            flags[free.name] = free.message
    eps_star = None
    if sweep and protocol.eps_star_attacks and BLACK_BOX in subsets:
        x, y, idx = subsets[BLACK_BOX]
        eps_star = minimal_perturbation(
            model, x, y, idx, attacks=protocol.eps_star_attacks, threat_model=protocol.threat_model,
            eps_max=protocol.eps_star_factor * protocol.eps, search_rounds=protocol.eps_star_rounds, store=store,
            dataset=protocol.dataset, model_name=model_name, seed=protocol.seed, batch_size=protocol.batch_size,
            device=device, progress=progress, console=console, backend=backend,
        )
    sweep_rows: list[SweepRow] = []
    if sweep and protocol.sweep_eps:
        sweep_rows, per_image[f"sweep {protocol.sweep_attack}"] = run_sweep(
            model, model_name, protocol, store, device=device, console=console, progress=progress, data_dir=data_dir,
            backend=backend,
        )
    return ModelEvaluation(
        model_name=model_name,
        protocol=protocol,
        clean_acc=clean_acc,
        clean_interval=clean_interval,
        attacks=attacks,
        rs=rs,
        rs_mean=rs_mean,
        worst_case=worst,
        flags=flags,
        indices_hash={f: hash_indices(subsets[f][2]) for f in outcomes},
        n_examples={f: len(subsets[f][2]) for f in outcomes},
        sweep=sweep_rows,
        seconds=time.perf_counter() - t0,
        min_perturbation=eps_star,
        checkpoint_sha256=checkpoint_sha256,
        per_image=per_image,
    )


def _worst_case_on_black_box(outcomes: dict[str, dict], subsets: dict) -> tuple[float, dict[str, float]]:
    """Worst case over all attacks on the black-box images, and every attack's ACC* on those images."""
    white_idx = subsets[WHITE_BOX][2].numpy()
    black_idx = subsets[BLACK_BOX][2].numpy()
    pos = np.searchsorted(white_idx, black_idx)
    if not np.array_equal(white_idx[pos], black_idx):
        raise RuntimeError("the black-box images are not a subset of the white-box images")
    robust = outcomes[BLACK_BOX]["clean"].clean_correct.copy()
    acc: dict[str, float] = {}
    for family in FAMILIES:
        for name, out in outcomes[family].items():
            if name == "clean":
                continue
            adv = out.adv_correct[pos] if family == WHITE_BOX else out.adv_correct
            acc[name] = float(adv.mean())
            robust &= adv
    return float(robust.mean()), acc


def run_sweep(
    model: nn.Module,
    model_name: str,
    protocol: Protocol,
    store: ResultStore,
    *,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    data_dir: str | os.PathLike | None = None,
    backend: Backend | None = None,
) -> tuple[list[SweepRow], PairedOutcomes]:
    """Robust accuracy of ``protocol.sweep_attack`` at each eps of the sweep, on the first ``n_sweep`` images: the
    rows of :func:`sweep_eps` and the per-image outcomes (one column per eps)."""
    x, y, idx = load_dataset(protocol.dataset, protocol.n_sweep, data_dir, None)
    return sweep_outcomes(
        model, model_name, x, y, idx, protocol.sweep_attack, protocol.threat_model,
        [parse_eps(e) for e in protocol.sweep_eps], store, dataset=protocol.dataset, seed=protocol.seed,
        batch_size=protocol.batch_size, device=device, console=console, progress=progress, backend=backend,
    )


def sweep_eps(*args, **kwargs) -> list[SweepRow]:  # noqa: ANN002, ANN003 - the arguments of sweep_outcomes
    """One row per eps: ACC* and ACC_norm of ``attack`` (each eps its own stored evaluation)."""
    return sweep_outcomes(*args, **kwargs)[0]


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
    backend: Backend | None = None,
) -> tuple[list[SweepRow], PairedOutcomes]:
    """One row per eps (ACC* and ACC_norm of ``attack``, each eps its own stored evaluation) and the per-image
    outcomes, one column per eps (named by its text, e.g. "8/255")."""
    rows: list[SweepRow] = []
    clean_correct, columns = None, {}
    for eps in eps_values:
        clean, outs, _, _ = evaluate(
            model, x, y, indices, attacks=[attack], threat=get_threat_model(threat_model, eps), dataset=dataset,
            model_name=model_name, seed=seed, batch_size=batch_size, device=device, store=store,
            progress=progress, console=console, checks=False, backend=backend,
        )
        report = compute_report(clean.clean_correct, {n: o.adv_correct for n, o in outs.items()})
        m = report.attacks[0]
        clean_correct = clean.clean_correct
        columns[format_eps(eps)] = outs[m.attack].adv_correct
        rows.append(SweepRow(attack=m.attack, eps=float(eps), eps_text=format_eps(eps), acc_star=m.acc_star,
                             acc_norm=m.acc_norm, interval=list(m.interval), n_examples=m.n))
    return rows, PairedOutcomes(np.zeros(0, bool) if clean_correct is None else clean_correct, columns)


def run_protocol(
    protocol: Protocol,
    models: Sequence[str],
    store: ResultStore,
    *,
    data_dir: str | os.PathLike | None = None,
    model_dir: str | os.PathLike | None = None,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    sweep: bool = True,
    on_model_done: Callable[[ModelEvaluation, nn.Module], None] | None = None,
    backend: Backend | None = None,
) -> list[ModelEvaluation]:
    """Evaluate every zoo model in ``models`` under ``protocol``; ``on_model_done`` gets each result as it lands.

    With a ``backend`` (a Ray cluster), the store batches of every model, family and sweep eps are computed there
    first, all together and longest first; the per-model pass then reads them back (and runs the model checks and
    the eps* search, whose rounds depend on each other, through the backend too)."""
    device = resolve_device(device)
    if not models:
        raise ValueError("no model to evaluate: name at least one zoo model (e.g. --models resnet20_bnn)")
    for name in models:  # fail on a bad name before hours of work, not after
        get_entry(name, protocol.dataset, model_dir)
    subsets = protocol_subsets(protocol, data_dir)
    if backend is not None:
        plans = []
        for name in models:
            model = load_model(name, model_dir, protocol.dataset, device=device)
            plans += protocol_plans(model, name, protocol, store, subsets, device=device, sweep=sweep,
                                    data_dir=data_dir)
        with make_progress(console, progress) as bar:
            backend.run(plans, bar)
    results = []
    for name in models:
        model = load_model(name, model_dir, protocol.dataset, device=device)
        result = run_model(
            model, name, protocol, store, subsets, device=device, console=console, progress=progress, sweep=sweep,
            data_dir=data_dir, backend=backend, checkpoint_sha256=checkpoint_sha256(name, protocol.dataset, model_dir),
        )
        results.append(result)
        if on_model_done is not None:
            on_model_done(result, model)
    return results


def protocol_plans(
    model: nn.Module,
    model_name: str,
    protocol: Protocol,
    store: ResultStore,
    subsets: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    *,
    device: str | torch.device | None = None,
    sweep: bool = True,
    data_dir: str | os.PathLike | None = None,
) -> list[EvalPlan]:
    """The evaluations :func:`run_model` runs for one model (each family, each sweep eps; not the eps* rounds,
    which depend on each other), as plans for a backend: the same specs, so the same store keys."""
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    common = {"dataset": protocol.dataset, "model_name": model_name, "seed": protocol.seed,
              "batch_size": protocol.batch_size, "device": device, "store": store}
    plans = []
    for family in FAMILIES:
        specs = protocol.white_box if family == WHITE_BOX else protocol.black_box
        if specs:
            x, y, idx = subsets[family]
            plans.append(prepare_evaluation(model, x, y, idx, attacks=[get_attack(s.name, **s.kwargs) for s in specs],
                                            threat=threat, **common)[0])
    if sweep and protocol.sweep_eps:
        x, y, idx = load_dataset(protocol.dataset, protocol.n_sweep, data_dir, None)
        for eps in protocol.sweep_eps:
            plans.append(prepare_evaluation(
                model, x, y, idx, attacks=[protocol.sweep_attack],
                threat=get_threat_model(protocol.threat_model, parse_eps(eps)), **common)[0])
    return plans


def protocol_findings(results: Sequence[ModelEvaluation], *, seed: int = 0) -> list[TwinComparison]:
    """Each BNN of ``results`` against its FP twin (when the twin is in ``results`` too): per attack family at the
    protocol eps and over the eps sweep, with paired 95% intervals and a verdict (:mod:`arbibench.evaluation.findings`).
    """
    twins = {r.model_name: fp_twin_name(ZOO[r.model_name]) for r in results if r.model_name in ZOO}
    return twin_findings({r.model_name: _without_self_transfer(r) for r in results}, twins, seed=seed)


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
