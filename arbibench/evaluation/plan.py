"""What one evaluation computes, decided once: the plan that both executors (the local runner and a backend such
as Ray) carry out, and the one way a computed batch is committed to the store.

:func:`plan_evaluation` checks the inputs and the model (eval mode, logits, two forward passes agree) and fixes what
the store keys follow from: the model's weights hash, the samples, the threat model, the seed, the batch size and
each attack's configuration. An :class:`EvalPlan` is then executed by :func:`arbibench.evaluation.runner.execute`,
and may first be handed to an :class:`~arbibench.evaluation.executors.Executor` that computes its batches elsewhere:
the same plan, so the same store rows. This module sits below both executors and imports neither.

Which network answers is decided here, once: :attr:`EvaluationContext.oracle` is the network whose answers count
(the simulation itself, or its deployed form under ``Inference.DEPLOYED``). Everything that computes a batch (the
runner, a worker of an executor) takes the oracle from the context instead of choosing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from arbibench.attacks import (
    AdaptiveAttack,
    Attack,
    AutoAttack,
    EstimatedAttack,
    ThreatModel,
    Transfer,
    get_attack,
)
from arbibench.attacks.threat import FLOAT
from arbibench.evaluation.batch import BatchOutcome
from arbibench.evaluation.inputs import check_images, check_labels, check_model, resolve_device
from arbibench.evaluation.settings import RunSettings
from arbibench.evaluation.store import ResultStore, hash_indices, hash_json, hash_model
from arbibench.evaluation.surrogates import attack_for_target
from arbibench.inference import Inference

#: The store's attack name of the clean pass.
CLEAN = "clean"


@dataclass
class EvaluationContext:
    """What every attack of one evaluation shares: model, samples, threat model and bookkeeping.

    ``model`` is the simulation (white-box attacks take their gradients on it); ``oracle`` is the network whose
    answers count: it answers the clean pass and every black-box query and decides every outcome. Under
    ``Inference.SIMULATION`` the two are the same module."""

    model: nn.Module
    oracle: nn.Module
    model_name: str
    model_hash: str
    x: torch.Tensor
    y: torch.Tensor
    indices: torch.Tensor
    threat: ThreatModel
    dataset: str
    seed: int
    batch_size: int
    device: torch.device
    store: ResultStore
    pool: bool = True  # black-box attacks run several store batches per forward batch (same results)
    discrepancies: int = 0  # fused-path answers the reference model contradicted (they cost queries only)
    notes: set[str] = field(default_factory=set)  # why a model's queries went to the reference model
    inference: Inference = Inference.SIMULATION

    def spec(self, attack: Attack | None) -> dict[str, Any]:
        """The store spec of ``attack`` (None: the clean pass): what its store key is a hash of."""
        base: dict[str, Any] = {
            "dataset": self.dataset,
            "indices_hash": hash_indices(self.indices),
            "n_examples": len(self.indices),
            "batch_size": self.batch_size,
        }
        if self.inference != Inference.SIMULATION:  # simulation keys stay those of every earlier store
            base["inference"] = self.inference
        if attack is None:
            return {**base, "attack": CLEAN}
        spec: dict[str, Any] = {
            **base,
            "attack": attack.config_dict(),
            "threat_model": self.threat.norm,
            "eps": self.threat.eps,
            "seed": self.seed,
        }
        if self.threat.grid != FLOAT:  # float keys stay those of every earlier store
            spec["grid"] = self.threat.grid
        return spec

    def store_key(self, attack: Attack | None) -> str:
        """The key the store files ``attack`` (None: the clean pass) under, computed without writing to it."""
        return hash_json({"model_hash": self.model_hash, **self.spec(attack)})


@dataclass(frozen=True)
class EvalPlan:
    """One evaluation, planned: its context (model, samples, threat, seed, store), its attacks, and the flags the
    model checks raised while planning."""

    ctx: EvaluationContext
    attacks: tuple[Attack, ...]
    flags: dict[str, str] = field(default_factory=dict)


def computed_by(plans: Sequence[EvalPlan], *, elsewhere: bool = False) -> str | None:
    """What computed the plans' batches, as their store recorded it (each machine's share where several did: a run
    resumed elsewhere, a cluster). A store whose batches name none falls back to this process's device, unless the
    batches were computed ``elsewhere`` (an executor): then None, since nothing says where."""
    from arbibench.machine import computed_on, provenance  # start-up: only a card asks

    if not plans:
        return None
    keys = [p.ctx.store_key(a) for p in plans for a in (None, *p.attacks)]
    named = provenance(plans[0].ctx.store.machine_seconds(keys))
    if named is None and not elsewhere:
        return computed_on(plans[0].ctx.device)
    return named


def attack_list(attacks: Sequence[str | Attack] | str | Attack) -> list[str | Attack]:
    """``attacks`` as a list (one name or attack stands for itself); an empty list is refused before any work."""
    listed: list[str | Attack] = [attacks] if isinstance(attacks, str | Attack) else list(attacks)
    if not listed:
        raise ValueError("no attack to run: name at least one (e.g. attacks=('fgsm', 'pgd'), --attacks fgsm,pgd); "
                         "for clean accuracy alone use clean_accuracy()")
    return listed


def _lacking(attack: Attack, norm: str) -> Attack | None:
    """The attack that cannot run under ``norm``: ``attack`` itself, or one it runs (a transfer attack's white-box
    attack, AutoAttack's components, the attack under a gradient estimator), which refuses only when it runs."""
    if norm not in attack.norms:
        return attack
    inner: list[Attack] = []
    if isinstance(attack, Transfer):
        inner = [get_attack(attack.config.attack)]
    elif isinstance(attack, AutoAttack):
        inner = attack.attacks
    elif isinstance(attack, EstimatedAttack | AdaptiveAttack):
        inner = [attack.attack]
    return next((lacking for a in inner if (lacking := _lacking(a, norm)) is not None), None)


def check_norms(attacks: Sequence[str | Attack], norm: str) -> None:
    """Every attack supports the threat model ``norm``: refused while planning, before any store or forward pass,
    not when its turn comes after the attacks before it were computed and stored."""
    for a in attacks:
        attack = get_attack(a) if isinstance(a, str) else a
        if (lacking := _lacking(attack, norm)) is None:
            continue
        who = f"attack {attack.name!r}" + ("" if lacking is attack else f" runs {lacking.name!r}, which")
        norms = " and ".join(lacking.norms) + " threat model" + ("s" if len(lacking.norms) > 1 else "")
        raise ValueError(f"{who} supports the {norms}, not {norm}; pick another attack or threat model "
                         "(`arbibench attacks list` shows each attack's norms)")


def plan_evaluation(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] | str | Attack,
    threat: ThreatModel,
    settings: RunSettings = RunSettings(),
    model_name: str = "model",
    store: ResultStore,
) -> EvalPlan:
    """Check the inputs and the model and plan the evaluation (the store keys follow from the plan): ``settings``
    names the dataset, seed, batch size, device, the network that answers and the pooling."""
    check_images(x, y)
    check_grid(x, threat)
    indices = torch.arange(len(y)) if indices is None else torch.as_tensor(indices, dtype=torch.int64).cpu()
    if indices.shape != y.shape:
        raise ValueError(f"indices must have one entry per sample: {tuple(indices.shape)} vs {tuple(y.shape)}")
    dev = resolve_device(settings.device)
    attack_objs = tuple(attack_for_target(a, model_name) for a in attack_list(attacks))
    check_norms(attack_objs, threat.norm)
    names = [a.name for a in attack_objs]
    if len(set(names)) != len(names):
        raise ValueError(f"attack list {names} names an attack twice; each attack is evaluated once")
    model = model.to(dev).eval()
    num_classes, flags = check_model(model, x[: min(8, len(x))].to(dev))
    check_labels(y, num_classes)
    ctx = EvaluationContext(model, oracle_of(model, settings.inference, model_name), model_name, hash_model(model),
                            x.cpu(), y.cpu().long(), indices, threat, settings.dataset, settings.seed,
                            settings.batch_size, dev, store, settings.pool, inference=settings.inference)
    return EvalPlan(ctx, attack_objs, flags)


def check_grid(x: torch.Tensor, threat: ThreatModel) -> None:
    """On a grid, the clean images must lie on it: the eps box is counted in whole levels from them."""
    off = int((~threat.on_grid(x)).sum()) if threat.grid != FLOAT else 0
    if off:
        raise ValueError(
            f"grid {threat.grid}: {off} of {len(x)} images have pixels off the k/255 grid (resized or re-encoded "
            "data), so no 8-bit attacker sees them; evaluate them with grid 'float', or round them to 8 bits first"
        )


def oracle_of(model: nn.Module, inference: Inference | str, model_name: str) -> nn.Module:
    """The network whose answers count for ``inference``: ``model`` itself for the simulation, its deployed network
    (built once per model) for ``Inference.DEPLOYED``. The one place that decides it: the plan's context and every
    worker of an executor call this."""
    if Inference.parse(inference) is Inference.SIMULATION:
        return model
    from arbibench.deploy import deployed  # start-up: the kernel is compiled (or loaded) on first use only

    try:
        return deployed(model)
    except ValueError as e:  # DeployError: the layer it cannot express, and why
        raise ValueError(f"--inference deployed: {model_name} cannot be deployed: {e}") from e


def commit_outcome(
    ctx: EvaluationContext, key: str, outcome: BatchOutcome, seconds: float, machine: str | None = None
) -> bool:
    """Commit one computed batch in one transaction (False: it was already there) and keep its fusion notes;
    ``machine`` names what computed it (:func:`arbibench.machine.computed_on`)."""
    start = outcome.batch_index * ctx.batch_size
    ctx.discrepancies += outcome.discrepancies
    if outcome.fusion_note:
        ctx.notes.add(outcome.fusion_note)
    return ctx.store.commit_batch(
        key,
        outcome.batch_index,
        ctx.indices[start : start + ctx.batch_size].tolist(),
        outcome.clean_correct,
        outcome.adv_correct,
        outcome.perturbation,
        outcome.queries,
        seconds=seconds,
        machine=machine,
    )
