"""Writing model cards: build the schema's card (:mod:`arbibench.cards`) from an evaluation result, then write it.

``model_info/<dataset>/<threat>/<name>.json`` holds RobustBench's fields plus arbibench's (method, bit widths,
per-attack ACC* and ACC_norm with intervals, RS and RS_mean per family, worst case, flags, data indices hashes, eps
sweep, eps*); :mod:`arbibench.cards` declares every field once, and the leaderboard reads the same declaration.
Cards are written atomically (temp file, then rename), so a crash never leaves half a card.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from arbibench.attacks import ATTACKS, BLACK_BOX, WHITE_BOX, access_group, get_attack, get_threat_model
from arbibench.cards import (
    AttackResult,
    CorruptionCard,
    CorruptionResult,
    CurvePoint,
    EpsStar,
    Estimate,
    ModelCard,
    Ratio,
    SweepPoint,
    card_text,
    percent,
    ratio,
)
from arbibench.data.datasets import load_dataset
from arbibench.evaluation.result import format_eps
from arbibench.evaluation.store import hash_indices
from arbibench.files import atomic_write, atomic_write_text
from arbibench.models.methods import get_method
from arbibench.models.zoo import ZOO, fp_twin_name

# The card's ``family`` of an attack: white-box or black-box (score-based, decision-based and transfer attacks).
FAMILIES = (WHITE_BOX, BLACK_BOX)


def method_metadata(model_name: str) -> dict[str, Any]:
    """What the zoo knows about ``model_name`` (backbone, method, paper, bit widths); empty for other models."""
    entry = ZOO.get(model_name)
    if entry is None:
        return {}
    method = get_method(entry.method)
    authors, _, rest = method.paper.partition(", ")
    venue = rest.rpartition(", ")[2] if ", " in rest else rest
    twin = fp_twin_name(entry)
    return {
        "authors": authors,
        "venue": venue,
        "architecture": entry.arch,
        "method": entry.method,
        "method_paper": method.paper,
        "bits_weights": method.bits_weights,
        "bits_activations": method.bits_activations,
        "fp_twin": twin,
        "checkpoint_sha256": entry.sha256,
    }


def identity_fields(name: str, dataset: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every card shares, in RobustBench's names (``meta`` from :func:`method_metadata`)."""
    return {
        "name": name,
        "link": None,
        "authors": meta.get("authors"),
        "additional_data": False,
        "number_forward_passes": 1,
        "dataset": dataset,
        "venue": meta.get("venue"),
        "architecture": meta.get("architecture"),
        "method": meta.get("method"),
        "method_paper": meta.get("method_paper"),
        "bits_weights": meta.get("bits_weights"),
        "bits_activations": meta.get("bits_activations"),
        "fp_twin": meta.get("fp_twin"),
        "checkpoint_sha256": meta.get("checkpoint_sha256"),
    }


def card_path(model_info: str | os.PathLike[str], dataset: str, threat_model: str, name: str) -> Path:
    return Path(model_info) / dataset / threat_model / f"{name}.json"


def write_card(card: ModelCard | CorruptionCard, path: Path) -> Path:
    """A card in the schema's layout (:func:`arbibench.cards.card_text`), written atomically."""
    return atomic_write_text(card_text(card), path, fault="card.write")


def _attack_row(name: str, family: str, acc_star: float, acc_norm: float, interval: tuple[float, float] | list[float],
                n: int, median_queries: float | None, seconds: float | None) -> AttackResult:
    return AttackResult(
        name=name, family=family, acc_star=percent(acc_star), acc_norm=ratio(acc_norm),  # type: ignore[arg-type]
        ci_low=percent(interval[0]), ci_high=percent(interval[1]), n_examples=n, median_queries=median_queries,
        seconds=seconds,
    )


def sweep_points(rows: list[dict[str, Any]]) -> tuple[SweepPoint, ...]:
    """The card's eps sweep from the rows of :func:`arbibench.protocol.run.sweep_eps` (ratios -> percent)."""
    return tuple(
        SweepPoint(attack=r["attack"], eps=r["eps"], eps_text=r.get("eps_text"), acc_star=percent(r["acc_star"]),  # type: ignore[arg-type]
                   acc_norm=r.get("acc_norm"), interval=(percent(r["interval"][0]), percent(r["interval"][1])),  # type: ignore[arg-type]
                   n_examples=r.get("n_examples"))
        for r in rows
    )


def protocol_card(result: Any) -> ModelCard:
    """The card of one :class:`~arbibench.protocol.run.ModelEvaluation`."""
    p = result.protocol
    meta = method_metadata(result.model_name)
    by_name = {a.name: a for a in result.attacks}
    autoattack = by_name.get("autoattack")
    return ModelCard(
        **identity_fields(result.model_name, p.dataset, meta),
        eps=p.eps,
        eps_text=p.eps_text,
        threat_model=p.threat_model,
        clean_acc=percent(result.clean_acc.get(WHITE_BOX)),  # type: ignore[arg-type]
        autoattack_acc=percent(autoattack.acc_star) if autoattack else None,
        unreliable=bool(result.flags),
        footnote="; ".join(list(p.notes) + [f"flag {k}" for k in result.flags]) or None,
        protocol=p.name,
        quick=p.quick,
        clean_acc_by_family={f: percent(v) for f, v in result.clean_acc.items()},  # type: ignore[misc]
        attacks={
            a.name: _attack_row(a.name, a.family, a.acc_star, a.acc_norm, a.interval, a.n_examples, a.median_queries,
                                round(a.seconds, 2))
            for a in result.attacks
        },
        rs={k: round(v, 4) for k, v in result.rs.items()},
        rs_mean={k: round(v, 4) for k, v in result.rs_mean.items()},
        worst_case_acc=percent(result.worst_case.get("all", result.worst_case.get(WHITE_BOX))),  # type: ignore[arg-type]
        worst_case_by_family={k: percent(v) for k, v in result.worst_case.items()},  # type: ignore[misc]
        flags=dict(result.flags),
        data_indices_hash=dict(result.indices_hash),
        n_examples=dict(result.n_examples),
        sweep=sweep_points(result.sweep),
        # compute time of the attacks as stored batch by batch: the same after a resumed run as after a fresh one
        seconds=round(sum(a.seconds for a in result.attacks), 1),
        **eps_star_fields(getattr(result, "eps_star", None)),
    )


def save_examples(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    attack: str,
    threat: Any,
    path: Path,
    *,
    n: int = 8,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> Path:
    """A few adversarial examples for the leaderboard's model page (``.npz``: uint8 images, labels, predictions).

    The examples are re-computed on the first ``n`` correctly classified images (cheap) rather than kept from the
    evaluation, so the store stays small. Predictions are those of the float adversarial images.
    """
    device = torch.device(device or "cpu")
    model = model.to(device).eval()
    with torch.no_grad():
        pred = model(x[: 4 * n].to(device)).argmax(1).cpu()
    ok = (pred == y[: 4 * n]).nonzero().flatten()[:n]
    xs, ys = x[ok], y[ok]
    x_adv = get_attack(attack)(model, xs.to(device), ys.to(device), threat, torch.Generator().manual_seed(seed))
    threat.verify(x_adv, xs.to(device))
    with torch.no_grad():
        pred_adv = model(x_adv).argmax(1).cpu()

    def u8(t: torch.Tensor) -> np.ndarray:
        return (t.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).numpy()

    arrays = {
        "x_clean": u8(xs), "x_adv": u8(x_adv), "y": ys.numpy().astype(np.int64), "pred_clean": pred[ok].numpy(),
        "pred_adv": pred_adv.numpy().astype(np.int64), "attack": np.array(attack),
    }
    return atomic_write(lambda f: np.savez_compressed(f, **arrays), path, fault="examples.write")


def write_protocol_card(
    result: Any, model_info: str | os.PathLike[str], model: nn.Module | None = None, *, data_dir: Any = None,
    device: str | torch.device | None = None,
) -> Path:
    """Write the card (and, given the model, its example images) under ``model_info``; returns the card path."""
    p = result.protocol
    card = protocol_card(result)
    path = card_path(model_info, p.dataset, p.threat_model, result.model_name)
    if model is not None:
        x, y, _ = load_dataset(p.dataset, 32, data_dir, None)
        attack = "pgd"
        examples = save_examples(
            model, x, y, attack, get_threat_model(p.threat_model, p.eps), path.with_name(
                f"{result.model_name}_examples.npz"), device=device,
        )
        card = replace(card, examples=examples)
    return write_card(card, path)


def eps_star_fields(summary: dict[str, Any] | None) -> dict[str, Any]:
    """Card fields of the minimal-perturbation summary (``MinimalPerturbation.to_dict``); empty when not computed.

    eps* values stay in input units (like ``eps``); the curve's robust accuracy is in percent like every accuracy.
    """
    if summary is None:
        return {}
    lo, hi = summary["median_eps_star_ci95"]
    return {
        "median_eps_star": summary["median_eps_star"],
        "median_eps_star_ci95": (lo, hi),
        "eps_star": EpsStar(
            attacks=tuple(summary["attacks"]),
            eps_max=summary["eps_max"],
            search_rounds=summary["search_rounds"],
            n_examples=summary["n_examples"],
            not_fooled_up_to_eps_max=percent(summary["not_fooled_up_to_eps_max"]),
            curve=tuple(CurvePoint(eps=row["eps"], robust_acc=percent(row["robust_acc"])) for row in summary["curve"]),
        ),
    }


def benchmark_card(result: Any) -> ModelCard:
    """The card of a :class:`~arbibench.evaluation.result.BenchmarkResult` (``benchmark(..., to_disk=True)``).

    One subset for every attack, so ACC_norm of both families divides by the same clean accuracy.
    """
    meta = method_metadata(result.model_name)
    d = result.to_dict()

    def family(name: str) -> str:
        cls = ATTACKS.get(name.partition("@")[0])
        return access_group(cls.family) if cls is not None else WHITE_BOX

    attacks = {
        name: _attack_row(name, family(name), m["acc_star"], m["acc_norm"], m["interval"], m["n"],
                          m.get("median_queries"), m.get("seconds"))
        for name, m in d["attacks"].items()
    }
    rs: dict[str, float] = {}
    rs_mean: dict[str, float] = {}
    for fam in FAMILIES:
        norms = [a.acc_norm for a in attacks.values() if a.family == fam]
        if norms:
            rs[fam], rs_mean[fam] = round(sum(norms), 4), round(sum(norms) / len(norms), 4)
    rs["all"], rs_mean["all"] = round(d["rs"], 4), round(d["rs_mean"], 4)
    auto = attacks.get("autoattack")
    return ModelCard(
        **identity_fields(result.model_name, result.dataset, meta),
        eps=result.eps,
        eps_text=format_eps(result.eps),
        threat_model=result.threat_model,
        clean_acc=percent(d["acc"]),  # type: ignore[arg-type]
        autoattack_acc=auto.acc_star if auto else None,
        unreliable=bool(result.flags),
        footnote="; ".join(list(result.notes) + [f"flag {k}" for k in result.flags]) or None,
        protocol=None,
        quick=None,
        subset=result.subset,
        attacks=attacks,
        rs=rs,
        rs_mean=rs_mean,
        worst_case_acc=percent(d["worst_case_acc"]),  # type: ignore[arg-type]
        flags=dict(result.flags),
        data_indices_hash={"all": hash_indices(result.indices)},
        n_examples={"all": int(len(result.indices))},
        sweep=(),
        **eps_star_fields(d.get("eps_star")),
    )


def _estimate(e: Any) -> Estimate:
    return Estimate(acc=percent(e.value), ci_low=percent(e.low), ci_high=percent(e.high))  # type: ignore[arg-type]


def _ratio(e: Any) -> Ratio | None:
    return None if e is None else Ratio(value=ratio(e.value), ci_low=ratio(e.low), ci_high=ratio(e.high))  # type: ignore[arg-type]


def corruption_card(result: Any) -> CorruptionCard:
    """The card of one :class:`~arbibench.protocol.corruptions.CorruptionEvaluation`: RobustBench's corruptions
    card (``model_info/cifar10/corruptions/<name>.json``: ``clean_acc``, ``corruptions_acc``) plus arbibench's
    per-corruption and per-severity accuracies, ratios and intervals, and the data source ("regenerated" or
    "official") on every card, in its footnote too."""
    p = result.protocol
    meta = method_metadata(result.model_name)
    regenerated = result.source == "regenerated"
    source_note = (f"CIFAR-10-C regenerated by arbibench (seed {result.generator_seed}, first {result.n_examples} test "
                   "images): not the official files, so not comparable digit for digit with RobustBench"
                   if regenerated else "official CIFAR-10-C files")
    notes = [source_note, *p.notes] + [f"flag {k}" for k in result.flags]
    return CorruptionCard(
        **identity_fields(result.model_name, p.dataset, meta),
        eps=None,
        threat_model=p.threat_model,
        clean_acc=percent(result.clean.value),  # type: ignore[arg-type]
        corruptions_acc=percent(result.mca.value),  # type: ignore[arg-type]
        unreliable=bool(result.flags),
        footnote="; ".join(notes),
        protocol=p.name,
        quick=p.quick,
        corruptions_source=result.source,
        corruptions_regenerated=regenerated,
        corruptions_generator_seed=result.generator_seed,
        clean_acc_interval=(percent(result.clean.low), percent(result.clean.high)),  # type: ignore[arg-type]
        corruptions_acc_interval=(percent(result.mca.low), percent(result.mca.high)),  # type: ignore[arg-type]
        corruptions_acc_norm=_ratio(result.relative_clean),
        corruptions_acc_vs_fp_twin=_ratio(result.relative_fp),
        corruptions={
            name: CorruptionResult(
                **{k: getattr(_estimate(result.corruption[name]), k) for k in ("acc", "ci_low", "ci_high")},
                severities={str(s): _estimate(e) for s, e in result.cells[name].items()},
            )
            for name in p.corruptions
        },
        flags=dict(result.flags),
        data_indices_hash={"all": result.indices_hash},
        n_examples={"per_cell": result.n_examples},
        seconds=round(result.seconds, 1),
    )


def write_corruption_card(result: Any, model_info: str | os.PathLike[str]) -> Path:
    """Write the corruptions card under ``model_info/<dataset>/corruptions/``; returns its path."""
    path = card_path(model_info, result.protocol.dataset, result.protocol.threat_model, result.model_name)
    return write_card(corruption_card(result), path)
