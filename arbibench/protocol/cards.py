"""The cards of a protocol run: one attack card per model (:class:`~arbibench.protocol.run.ModelEvaluation`) and one
common-corruptions card per model (:class:`~arbibench.protocol.corruptions.CorruptionEvaluation`).

``model_info/<dataset>/<threat>/<name>.json`` holds RobustBench's fields plus arbibench's (method, bit widths, the
sha256 of the checkpoint measured, per-attack ACC* and ACC_norm with intervals, RS and RS_mean per family, worst
case, flags, data indices hashes, eps sweep, eps*); :mod:`arbibench.cards` declares every field once, and the
leaderboard reads the same declaration. Cards are written atomically, so a crash never leaves half a card.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from arbibench.attacks import BLACK_BOX, WHITE_BOX, get_threat_model
from arbibench.cards import CorruptionCard, CorruptionResult, Estimate, ModelCard, Ratio, SweepPoint, percent, ratio
from arbibench.data.datasets import load_dataset
from arbibench.evaluation.bootstrap import Estimate as Interval
from arbibench.evaluation.cards import (
    attack_row,
    card_path,
    eps_star_fields,
    model_identity,
    replaces_full_card,
    write_card,
)
from arbibench.evaluation.examples import EXAMPLES_ATTACK, save_examples
from arbibench.protocol.corruptions import CorruptionEvaluation
from arbibench.protocol.run import ALL, ModelEvaluation, SweepRow


def sweep_points(rows: Sequence[SweepRow]) -> tuple[SweepPoint, ...]:
    """The card's eps sweep from the rows of :func:`arbibench.protocol.run.sweep_eps` (ratios -> percent)."""
    return tuple(
        SweepPoint(attack=r["attack"], eps=r["eps"], eps_text=r["eps_text"], acc_star=percent(r["acc_star"]),
                   acc_norm=r["acc_norm"], interval=(percent(r["interval"][0]), percent(r["interval"][1])),
                   n_examples=r["n_examples"])
        for r in rows
    )


def protocol_card(result: ModelEvaluation) -> ModelCard:
    """The attack card of one model under one protocol."""
    p = result.protocol
    autoattack = next((a for a in result.attacks if a.name == "autoattack"), None)
    worst = result.worst_case.get(ALL, result.worst_case.get(WHITE_BOX))
    clean = result.clean_acc.get(WHITE_BOX, result.clean_acc.get(BLACK_BOX))
    if worst is None or clean is None:
        raise ValueError(f"{result.model_name}: the evaluation ran no attack family; there is nothing to card")
    return ModelCard(
        **model_identity(result.model_name, p.dataset, result.checkpoint_sha256),
        inference=result.inference,
        grid=None if p.grid == "float" else p.grid,
        eps=p.eps,
        eps_text=p.eps_text,
        threat_model=p.threat_model,
        clean_acc=percent(clean),
        autoattack_acc=percent(autoattack.acc_star) if autoattack else None,
        unreliable=bool(result.flags),
        footnote="; ".join(list(p.notes) + [f"flag {k}" for k in result.flags]) or None,
        protocol=p.name,
        quick=p.quick,
        clean_acc_by_family={f: percent(v) for f, v in result.clean_acc.items()},
        attacks={
            a.name: attack_row(a.name, a.family, a.acc_star, a.acc_norm, a.interval, a.n_examples, a.median_queries,
                               round(a.seconds, 2))
            for a in result.attacks
        },
        rs={k: round(v, 4) for k, v in result.rs.items()},
        rs_mean={k: round(v, 4) for k, v in result.rs_mean.items()},
        worst_case_acc=percent(worst),
        worst_case_by_family={k: percent(v) for k, v in result.worst_case.items()},
        flags=dict(result.flags),
        data_indices_hash=dict(result.indices_hash),
        n_examples=dict(result.n_examples),
        sweep=sweep_points(result.sweep),
        # compute time of the attacks as stored batch by batch: the same after a resumed run as after a fresh one
        seconds=round(sum(a.seconds for a in result.attacks), 1),
        machine=result.machine,
        **eps_star_fields(result.min_perturbation),
    )


def write_protocol_card(
    result: ModelEvaluation, model_info: str | os.PathLike[str], model: nn.Module | None = None, *,
    data_dir: str | os.PathLike[str] | None = None, device: str | torch.device | None = None,
) -> Path | None:
    """Write the card (and, given the model, its example images first) under ``model_info``; returns the card path,
    or None where a quick or demo run's card would replace the full-protocol card of the same checkpoint there
    (:func:`~arbibench.evaluation.cards.replaces_full_card`): that card is kept, and nothing is written."""
    p = result.protocol
    card = protocol_card(result)
    path = card_path(model_info, p.dataset, p.threat_model, result.model_name, inference=result.inference,
                     grid=p.grid)
    if replaces_full_card(card, path):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    if model is not None:
        x, y, _ = load_dataset(p.dataset, 32, data_dir, None)
        examples = save_examples(model, x, y, EXAMPLES_ATTACK, get_threat_model(p.threat_model, p.eps, p.grid),
                                 path.with_name(f"{result.model_name}_examples.npz"), device=device)
        card = replace(card, examples=examples)
    return write_card(card, path)


def _estimate(e: Interval) -> Estimate:
    return Estimate(acc=percent(e.value), ci_low=percent(e.low), ci_high=percent(e.high))


def _ratio(e: Interval | None) -> Ratio | None:
    return None if e is None else Ratio(value=ratio(e.value), ci_low=ratio(e.low), ci_high=ratio(e.high))


def corruption_card(result: CorruptionEvaluation) -> CorruptionCard:
    """RobustBench's corruptions card (``model_info/cifar10/corruptions/<name>.json``: ``clean_acc``,
    ``corruptions_acc``) plus arbibench's per-corruption and per-severity accuracies, ratios and intervals, and the
    data source ("regenerated" or "official") on every card, in its footnote too."""
    p = result.protocol
    regenerated = result.source == "regenerated"
    source_note = (f"CIFAR-10-C regenerated by arbibench (seed {result.generator_seed}, first {result.n_examples} test "
                   "images): not the official files, so not comparable digit for digit with RobustBench"
                   if regenerated else "official CIFAR-10-C files")
    notes = [source_note, *p.notes] + [f"flag {k}" for k in result.flags]
    return CorruptionCard(
        **model_identity(result.model_name, p.dataset, result.checkpoint_sha256),
        eps=None,
        threat_model=p.threat_model,
        clean_acc=percent(result.clean.value),
        corruptions_acc=percent(result.mca.value),
        unreliable=bool(result.flags),
        footnote="; ".join(notes),
        protocol=p.name,
        quick=p.quick,
        corruptions_source=result.source,
        corruptions_regenerated=regenerated,
        corruptions_generator_seed=result.generator_seed,
        corruptions_data_sha256=result.data_sha256,
        clean_acc_interval=(percent(result.clean.low), percent(result.clean.high)),
        corruptions_acc_interval=(percent(result.mca.low), percent(result.mca.high)),
        corruptions_acc_norm=_ratio(result.relative_clean),
        corruptions_acc_vs_fp_twin=_ratio(result.relative_fp),
        corruptions={
            name: CorruptionResult(
                acc=percent(result.corruption[name].value), ci_low=percent(result.corruption[name].low),
                ci_high=percent(result.corruption[name].high),
                severities={str(s): _estimate(e) for s, e in result.cells[name].items()},
            )
            for name in p.corruptions
        },
        flags=dict(result.flags),
        data_indices_hash={ALL: result.indices_hash},
        n_examples={"per_cell": result.n_examples},
        seconds=round(result.seconds, 1),
        machine=result.machine,
    )


def write_corruption_card(result: CorruptionEvaluation, model_info: str | os.PathLike[str]) -> Path:
    """Write the corruptions card under ``model_info/<dataset>/corruptions/``; returns its path."""
    path = card_path(model_info, result.protocol.dataset, result.protocol.threat_model, result.model_name)
    return write_card(corruption_card(result), path)
