"""What one evaluation computes, decided once: the plan that both executors (the local runner and a backend such
as Ray) carry out, and the one way a computed batch is committed to the store.

:func:`plan_evaluation` checks the inputs and the model (eval mode, logits, two forward passes agree) and fixes what
the store keys follow from: the model's weights hash, the samples, the threat model, the seed, the batch size and
each attack's configuration. An :class:`EvalPlan` is then executed by :func:`arbibench.evaluation.runner.execute`,
and may first be handed to a :class:`~arbibench.evaluation.backends.Backend` that computes its batches elsewhere:
the same plan, so the same store rows. This module sits below both executors and imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from arbibench.attacks import Attack, ThreatModel
from arbibench.attacks.threat import FLOAT
from arbibench.evaluation.batch import BatchOutcome
from arbibench.evaluation.inputs import check_images, check_labels, check_model, resolve_device
from arbibench.evaluation.store import ResultStore, hash_indices, hash_json, hash_model
from arbibench.evaluation.surrogates import attack_for_target

#: The store's attack name of the clean pass.
CLEAN = "clean"
#: What answers the clean pass and the black-box queries and decides every outcome: the float model itself, or the
#: deployed bit-packed network of a BNN (:mod:`arbibench.deploy`); white-box attacks always take their gradients on the
#: simulation, the only differentiable form.
SIMULATION, DEPLOYED = "simulation", "deployed"
INFERENCES = (SIMULATION, DEPLOYED)


@dataclass
class EvaluationContext:
    """What every attack of one evaluation shares: model, samples, threat model and bookkeeping."""

    model: nn.Module
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
    inference: str = SIMULATION
    oracle: nn.Module | None = None  # the deployed network when inference is "deployed"

    @property
    def decider(self) -> nn.Module:
        """The network whose answers count: clean pass, black-box queries, verification of every example."""
        return self.model if self.oracle is None else self.oracle

    def spec(self, attack: Attack | None) -> dict[str, Any]:
        """The store spec of ``attack`` (None: the clean pass): what its store key is a hash of."""
        base: dict[str, Any] = {
            "dataset": self.dataset,
            "indices_hash": hash_indices(self.indices),
            "n_examples": len(self.indices),
            "batch_size": self.batch_size,
        }
        if self.inference != SIMULATION:  # simulation keys stay those of every earlier store
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


def attack_list(attacks: Sequence[str | Attack] | str | Attack) -> list[str | Attack]:
    """``attacks`` as a list (one name or attack stands for itself); an empty list is refused before any work."""
    listed: list[str | Attack] = [attacks] if isinstance(attacks, str | Attack) else list(attacks)
    if not listed:
        raise ValueError("no attack to run: name at least one (e.g. attacks=('fgsm', 'pgd'), --attacks fgsm,pgd); "
                         "for clean accuracy alone use clean_accuracy()")
    return listed


def plan_evaluation(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    attacks: Sequence[str | Attack] | str | Attack,
    threat: ThreatModel,
    dataset: str = "custom",
    model_name: str = "model",
    seed: int = 0,
    batch_size: int = 200,
    device: str | torch.device | None = None,
    store: ResultStore,
    pool: bool = True,
    inference: str = SIMULATION,
) -> EvalPlan:
    """Check the inputs and the model and plan the evaluation (the store keys follow from the plan)."""
    check_images(x, y)
    check_grid(x, threat)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    indices = torch.arange(len(y)) if indices is None else torch.as_tensor(indices, dtype=torch.int64).cpu()
    if indices.shape != y.shape:
        raise ValueError(f"indices must have one entry per sample: {tuple(indices.shape)} vs {tuple(y.shape)}")
    dev = resolve_device(device)
    attack_objs = tuple(attack_for_target(a, model_name) for a in attack_list(attacks))
    names = [a.name for a in attack_objs]
    if len(set(names)) != len(names):
        raise ValueError(f"attack list {names} names an attack twice; each attack is evaluated once")
    model = model.to(dev).eval()
    num_classes, flags = check_model(model, x[: min(8, len(x))].to(dev))
    check_labels(y, num_classes)
    ctx = EvaluationContext(model, model_name, hash_model(model), x.cpu(), y.cpu().long(), indices, threat, dataset,
                            seed, batch_size, dev, store, pool, inference=inference,
                            oracle=deployed_oracle(model, inference, model_name))
    return EvalPlan(ctx, attack_objs, flags)


def check_grid(x: torch.Tensor, threat: ThreatModel) -> None:
    """On a grid, the clean images must lie on it: the eps box is counted in whole levels from them."""
    off = int((~threat.on_grid(x)).sum()) if threat.grid != FLOAT else 0
    if off:
        raise ValueError(
            f"grid {threat.grid}: {off} of {len(x)} images have pixels off the k/255 grid (resized or re-encoded "
            "data), so no 8-bit attacker sees them; evaluate them with grid 'float', or round them to 8 bits first"
        )


def deployed_oracle(model: nn.Module, inference: str, model_name: str) -> nn.Module | None:
    """The deployed network of ``model`` for ``inference="deployed"`` (built once per model), else None."""
    if inference not in INFERENCES:
        raise ValueError(f"inference must be one of {', '.join(INFERENCES)}, got {inference!r}")
    if inference == SIMULATION:
        return None
    from arbibench.deploy import deployed  # start-up: the kernel is compiled (or loaded) on first use only

    try:
        return deployed(model)
    except ValueError as e:  # DeployError: the layer it cannot express, and why
        raise ValueError(f"--inference deployed: {model_name} cannot be deployed: {e}") from e


def commit_outcome(
    ctx: EvaluationContext, key: str, outcome: BatchOutcome, seconds: float, machine: str | None = None
) -> bool:
    """Commit one computed batch in one transaction (False: it was already there) and keep its oracle notes;
    ``machine`` names what computed it (:func:`arbibench.machine.computed_on`)."""
    start = outcome.batch_index * ctx.batch_size
    ctx.discrepancies += outcome.discrepancies
    if outcome.inference_note:
        ctx.notes.add(outcome.inference_note)
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
