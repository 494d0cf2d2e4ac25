"""The unit of work: one store batch of one evaluation, computed by a pure function.

:func:`compute_batch` takes the model, the attack (``None``: the clean pass), the threat model, the seed, the batch
index, the batch's images and labels and (for an attack) the batch's clean outcomes, and returns the per-sample
outcome columns the store commits. It reads and writes nothing else, so the local runner and a remote worker that
call it on the same values get the same columns: each batch draws from its own generator seeded by
``(seed, batch index)``, and a model's answer for an image does not depend on which process computes it, as long as
the images keep their memory layout (dtype and strides: see :func:`layout`) and torch its thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from arbibench.attacks import Attack, AttackOutput, ThreatModel
from arbibench.evaluation.inputs import check_finite_logits


def batch_generator(seed: int, batch_index: int) -> torch.Generator:
    """The generator of one batch: the same for the same (seed, batch index), wherever the batch is computed."""
    return torch.Generator().manual_seed(seed * 1_000_003 + batch_index)


@dataclass(frozen=True)
class BatchOutcome:
    """The per-sample columns of one store batch, in the batch's order, as :meth:`ResultStore.commit_batch` takes
    them, plus what the queries report about the fused path (:func:`arbibench.nn.fused.fused_path`)."""

    batch_index: int
    clean_correct: list[bool]
    adv_correct: list[bool]
    perturbation: list[float]
    queries: list[int | None] | None  # black-box attacks only
    discrepancies: int = 0  # fused-path answers the reference model contradicted
    fusion_note: str | None = None  # why the reference model answered the queries, when it did


def layout(x: torch.Tensor) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """dtype, shape and strides of ``x``: what a remote worker checks its images against the driver's (a BNN's sign
    can flip on the rounding of another layout)."""
    return str(x.dtype), tuple(x.shape), tuple(x.stride())


def compute_batch(
    model: nn.Module,
    attack: Attack | None,
    threat: ThreatModel,
    seed: int,
    batch_index: int,
    x: torch.Tensor,
    y: torch.Tensor,
    clean_correct: torch.Tensor | None,
    device: torch.device,
    *,
    oracle: nn.Module,
) -> BatchOutcome:
    """The outcome columns of one store batch: the clean pass (``attack=None``) or ``attack`` on the images that
    ``clean_correct`` (the batch's clean outcomes) marks as correctly classified, verified on ``oracle``.

    ``oracle`` is the context's (:attr:`arbibench.evaluation.plan.EvaluationContext.oracle`: ``model`` itself, or
    the deployed network of a BNN): it answers the clean pass and every black-box query and decides every outcome;
    a white-box attack takes its gradients on ``model``, the simulation."""
    xb, yb = x.to(device), y.to(device)
    if attack is None:
        with torch.no_grad():
            logits = oracle(xb)
        check_finite_logits(logits, f"clean pass, batch {batch_index}")
        return outcome_columns(oracle, threat, "clean", batch_index, xb, yb, logits.argmax(1) == yb, None)
    if clean_correct is None:
        raise ValueError(f"batch {batch_index} of {attack.name} needs the clean outcomes of its images")
    clean_ok = clean_correct.to(device=device, dtype=torch.bool)
    attacked = clean_ok.nonzero().flatten()
    output = None
    target = model if attack.needs_gradients else oracle
    if len(attacked):
        output = attack.output(target, xb[attacked], yb[attacked], threat, batch_generator(seed, batch_index))
    return outcome_columns(oracle, threat, attack.name, batch_index, xb, yb, clean_ok, output)


def outcome_columns(
    model: nn.Module,
    threat: ThreatModel,
    name: str,
    batch_index: int,
    x: torch.Tensor,
    y: torch.Tensor,
    clean_ok: torch.Tensor,
    output: AttackOutput | None,
) -> BatchOutcome:
    """Verify ``output`` (the attack's output for the images ``clean_ok`` marks) on the reference model and build
    the batch's columns.

    The reference model decides, whatever answered the attack's queries; nothing unverified is ever counted.
    Only a query attack's output (``queries`` set) brings its ``min_distance`` into the store: a white-box
    attack's perturbation column stays the distance of the images it returned."""
    adv_ok = clean_ok.clone()
    pert = torch.zeros(len(y), device=x.device)
    queries: list[int | None] | None = None
    discrepancies, note = 0, None
    if output is not None:
        x_adv = output.x_adv
        attacked = clean_ok.nonzero().flatten()
        x0, y0 = x[attacked], y[attacked]
        threat.verify(x_adv, x0)
        with torch.no_grad():
            logits = model(x_adv)
        check_finite_logits(logits, f"{name} adversarial examples, batch {batch_index}")
        adv_ok[attacked] = logits.argmax(1) == y0
        pert[attacked] = threat.distance(x_adv, x0).to(pert.dtype)
        if output.queries is not None:
            # smallest adversarial perturbation found (decision-based attacks may find one beyond eps: the
            # sample then stays robust at this eps, and its distance is kept for other eps)
            min_distance = output.min_distance
            if min_distance is None:
                raise RuntimeError(f"{name} reported query counts without min_distance (batch {batch_index})")
            found = torch.isfinite(min_distance)
            pert[attacked[found]] = min_distance[found].to(pert)
            queries = [None] * len(y)
            for i, q in zip(attacked.tolist(), output.queries.tolist(), strict=True):
                queries[i] = int(q)
            discrepancies, note = output.discrepancies, output.fusion_note
    return BatchOutcome(batch_index, clean_ok.tolist(), adv_ok.tolist(), pert.tolist(), queries, discrepancies, note)
