"""What every result card says about the model it measured, and where and how a card is written.

The schema (:mod:`arbibench.cards`) declares the fields; this module fills the ones every card shares (RobustBench's
identity fields, the BNN method, the FP twin and the sha256 of the checkpoint measured) from the zoo, and writes a
card atomically at ``model_info/<dataset>/<threat>/<name>.json``. The cards themselves are built by the results they
describe: :meth:`arbibench.evaluation.result.BenchmarkResult.to_card` and :mod:`arbibench.protocol.cards`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from arbibench.cards import AttackResult, CorruptionCard, CurvePoint, EpsStar, ModelCard, card_text, percent, ratio
from arbibench.evaluation.min_perturbation import MinimalPerturbation
from arbibench.files import atomic_write_text, sha256_file
from arbibench.inference import Inference
from arbibench.models.methods import get_method
from arbibench.models.zoo import ZOO, fp_twin_name, get_entry, verified_checkpoint


class IdentityFields(TypedDict):
    """The zoo's values of :class:`arbibench.cards.CardIdentity`'s fields (``ModelCard(**identity, ...)``); None where
    the zoo does not know the model."""

    name: str
    link: str | None
    authors: str | None
    additional_data: bool
    number_forward_passes: int
    dataset: str
    venue: str | None
    architecture: str | None
    method: str | None
    method_paper: str | None
    bits_weights: int | None
    bits_activations: int | None
    fp_twin: str | None
    checkpoint_sha256: str | None


def model_identity(name: str, dataset: str, checkpoint_sha256: str | None) -> IdentityFields:
    """The shared card fields of ``name``: the zoo's metadata for a zoo model, only the name for any other.

    ``checkpoint_sha256`` is the sha256 of the checkpoint file the numbers were measured on (None for a model that
    was handed over as an object): :func:`checkpoint_sha256` gives it for a model loaded by name.
    """
    entry = ZOO.get(name)
    method = None if entry is None else get_method(entry.method)
    return IdentityFields(
        name=name,
        link=None,
        authors=None if method is None else method.authors,
        additional_data=False,
        number_forward_passes=1,
        dataset=dataset,
        venue=None if method is None else method.venue,
        architecture=None if entry is None else entry.arch,
        method=None if entry is None else entry.method,
        method_paper=None if method is None else method.paper,
        bits_weights=None if method is None else method.bits_weights,
        bits_activations=None if method is None else method.bits_activations,
        fp_twin=None if entry is None else fp_twin_name(entry),
        checkpoint_sha256=checkpoint_sha256,
    )


def checkpoint_sha256(name: str, dataset: str, model_dir: str | os.PathLike[str] | None = None) -> str:
    """The sha256 of the checkpoint :func:`~arbibench.models.zoo.load_model` loads for ``name``: the pinned one
    for a shipped model (loading checks the file against it), else the file's own."""
    entry = get_entry(name, dataset, model_dir)
    return entry.sha256 or sha256_file(verified_checkpoint(entry, model_dir))


def card_path(model_info: str | os.PathLike[str], dataset: str, threat_model: str, name: str, *,
              inference: Inference | str = Inference.SIMULATION, grid: str = "float") -> Path:
    """Where the card of ``name`` goes: a deployed network's card (``inference``) and an 8-bit grid's card (``grid``)
    each in a folder beside the simulation's float card, never in its place or its ranking."""
    folder = Path(model_info) / dataset / threat_model
    if Inference.parse(inference) is not Inference.SIMULATION:
        folder /= str(inference)
    if grid != "float":
        folder /= grid
    return folder / f"{name}.json"


def replaces_full_card(card: ModelCard, path: Path) -> bool:
    """Whether writing ``card`` at ``path`` would replace a full-protocol card of the same checkpoint with a smaller
    measurement (a quick or demo run's card, or an ``eval`` card): hours of attacks would give way to minutes, and
    the leaderboard would rank the smaller one. A full-protocol card replaces anything; any card replaces one of
    other weights (a stale card). An unreadable file at ``path`` is no card."""
    if (card.protocol is not None and card.quick is False) or not path.is_file():
        return False
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(old, dict) and old.get("protocol") is not None and old.get("quick") is False
            and old.get("checkpoint_sha256") == card.checkpoint_sha256)


def write_card(card: ModelCard | CorruptionCard, path: Path) -> Path:
    """A card in the schema's layout (:func:`arbibench.cards.card_text`), written atomically (fault point
    ``card.write``)."""
    return atomic_write_text(card_text(card), path, fault="card.write")


def attack_row(name: str, family: str, acc_star: float, acc_norm: float, interval: Sequence[float], n: int,
               median_queries: float | None, seconds: float | None) -> AttackResult:
    """One attack's card row from ratios (accuracies become percent)."""
    return AttackResult(
        name=name, family=family, acc_star=percent(acc_star), acc_norm=ratio(acc_norm), ci_low=percent(interval[0]),
        ci_high=percent(interval[1]), n_examples=n, median_queries=median_queries, seconds=seconds,
    )


class EpsStarFields(TypedDict, total=False):
    median_eps_star: float | None
    median_eps_star_ci95: tuple[float | None, float | None]
    eps_star: EpsStar


def eps_star_fields(found: MinimalPerturbation | None) -> EpsStarFields:
    """Card fields of the minimal-perturbation search; empty when it was not run.

    eps* values stay in input units (like ``eps``); the curve's robust accuracy is in percent like every accuracy.
    ``median_eps_star`` keeps its meaning (every image, misclassified ones at 0); the median over the correctly
    classified images and the search's floor go into the ``eps_star`` record.
    """
    if found is None:
        return {}
    summary = found.to_dict()  # infinite and undefined eps* become None, as the card holds them
    lo, hi = summary["median_eps_star_ci95"]
    clo, chi = summary["median_eps_star_correct_ci95"]
    return {
        "median_eps_star": summary["median_eps_star"],
        "median_eps_star_ci95": (lo, hi),
        "eps_star": EpsStar(
            attacks=tuple(found.attacks),
            eps_max=found.eps_max,
            search_rounds=found.search_rounds,
            n_examples=len(found.eps_star),
            not_fooled_up_to_eps_max=percent(summary["not_fooled_up_to_eps_max"]),
            curve=tuple(CurvePoint(eps=eps, robust_acc=percent(acc), robust_acc_low=percent(low))
                        for eps, acc, low in found.curve()),
            search=summary["search"],
            eps_floor=found.eps_floor,
            probe_draws=found.probe_draws,
            n_correct=summary["n_correct"],
            censored=percent(summary["censored"]),
            median_correct=summary["median_eps_star_correct"],
            median_correct_ci95=(clo, chi),
            median_certified=summary.get("median_certified_correct"),
        ),
    }
