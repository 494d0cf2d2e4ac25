"""Part of a protocol run: the store batches of some attacks only, so that one run can be split across machines.

A protocol's attacks differ by orders of magnitude in what suits a machine. AutoAttack's batches are independent
gradient work that a GPU runs many at once; a sequential query attack such as RayS is a chain of small forwards that
a GPU shared by many workers runs no faster than a CPU does. :func:`compute_attacks` computes the batches of the named
attacks (and the clean passes they start from) into the store and writes no card: the store's rows join the rest of
the run elsewhere (merged into that run's store), and ``protocol run`` without the filter scores the whole protocol
and writes the card once every batch is stored. The eps* search is left to that run (its rounds depend on each
other and on every attack named there).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from rich.console import Console

from arbibench.evaluation.batch_jobs import missing_batches
from arbibench.evaluation.executors import Executor
from arbibench.evaluation.inputs import resolve_device
from arbibench.evaluation.plan import EvalPlan
from arbibench.evaluation.result import format_eps
from arbibench.evaluation.runner import execute, make_progress
from arbibench.evaluation.store import ResultStore
from arbibench.inference import Inference
from arbibench.protocol.presets import Protocol
from arbibench.protocol.run import ModelPlan, check_model_names, plan_zoo_model, protocol_subsets, run_settings


def protocol_attack_names(protocol: Protocol, *, sweep: bool = True) -> list[str]:
    """Every attack a run of ``protocol`` evaluates, in the preset's order (the sweep's attack when it sweeps)."""
    names = [spec.name for spec in protocol.attacks]
    if sweep and protocol.sweep_eps and protocol.sweep_attack not in names:
        names.append(protocol.sweep_attack)
    return names


def check_attack_names(protocol: Protocol, attacks: Sequence[str], *, sweep: bool = True) -> list[str]:
    """``attacks`` without duplicates, or one ValueError naming the ones ``protocol`` does not evaluate."""
    wanted = list(dict.fromkeys(a.strip() for a in attacks if a.strip()))
    known = protocol_attack_names(protocol, sweep=sweep)
    if not wanted:
        raise ValueError(f"--only-attacks names no attack; name some of {protocol.label}'s: {', '.join(known)}")
    unknown = [a for a in wanted if a not in known]
    if unknown:
        raise ValueError(
            f"--only-attacks: {', '.join(unknown)} not in protocol {protocol.label}; its attacks are {', '.join(known)}"
        )
    return wanted


@dataclass(frozen=True)
class StoredShare:
    """How much of one evaluation the store holds: the model, a label ("white-box: autoattack", "sweep eps=8/255:
    apgd_ce"), and the store batches held of all."""

    model_name: str
    evaluation: str
    batches_done: int
    batches_total: int


def _labelled_plans(model_plan: ModelPlan, attacks: Sequence[str]) -> list[tuple[str, EvalPlan]]:
    """The model's evaluations cut down to ``attacks`` (those left with none dropped), each with its label's prefix."""
    planned = [*model_plan.families.items(),
               *((f"sweep eps={format_eps(p.ctx.threat.eps)}", p) for p in model_plan.sweep)]
    cut = []
    for prefix, plan in planned:
        kept = tuple(a for a in plan.attacks if a.name in attacks)
        if kept:
            cut.append((prefix, replace(plan, attacks=kept)))
    return cut


def _shares(model_name: str, labelled: Sequence[tuple[str, EvalPlan]]) -> list[StoredShare]:
    shares = []
    for prefix, plan in labelled:
        ctx = plan.ctx
        n_batches = -(-len(ctx.y) // ctx.batch_size)
        for attack in plan.attacks:
            key = ctx.store.register(ctx.model_hash, ctx.model_name, attack.name, ctx.spec(attack))
            done = n_batches - len(missing_batches(plan, key))
            shares.append(StoredShare(model_name, f"{prefix}: {attack.name}", done, n_batches))
    return shares


def compute_attacks(
    protocol: Protocol,
    models: Sequence[str],
    store: ResultStore,
    attacks: Sequence[str],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    sweep: bool = True,
    backend: Executor | None = None,
    inference: Inference | str = Inference.SIMULATION,
) -> list[StoredShare]:
    """Compute the store batches of ``attacks`` (names from ``protocol``) for every model in ``models``, keyed as a
    full run of ``protocol`` keys them, and say how much of each of those evaluations the store now holds.

    With a ``backend`` every model is planned first and all their batches go to it together; without one each model
    is planned and computed in turn here. No gradient-masking check runs and no card is written: both belong to the
    run that scores the whole protocol."""
    wanted = check_attack_names(protocol, attacks, sweep=sweep)
    check_model_names(protocol, models, model_dir)
    settings = run_settings(protocol, device=resolve_device(device), inference=inference)
    subsets = protocol_subsets(protocol, data_dir)

    def cut(name: str) -> list[tuple[str, EvalPlan]]:
        model_plan = plan_zoo_model(name, protocol, store, subsets, data_dir=data_dir, model_dir=model_dir,
                                    settings=settings, sweep=sweep)
        return _labelled_plans(model_plan, wanted)

    shares: list[StoredShare] = []
    if backend is not None:
        planned = {name: cut(name) for name in models}
        with make_progress(console, progress) as bar:
            backend.run([plan for labelled in planned.values() for _, plan in labelled], bar)
        for name, labelled in planned.items():
            shares += _shares(name, labelled)
        return shares
    for name in models:
        labelled = cut(name)
        for _, plan in labelled:
            execute(plan, progress=progress, console=console, checks=False)
        shares += _shares(name, labelled)
    return shares
