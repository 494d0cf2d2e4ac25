"""Model cards: one JSON file per model, dataset and threat model, as RobustBench's ``model_info`` has them.

``model_info/<dataset>/<threat>/<name>.json`` carries RobustBench's fields (link, name, authors, additional_data,
number_forward_passes, dataset, venue, architecture, eps, clean_acc, reported, autoattack_acc, unreliable,
footnote) with numbers as numbers, never strings, and arbibench's (method, bit widths, per-attack ACC* and
ACC_norm with intervals, RS and RS_mean per family, worst case, flags, data indices hashes, eps sweep). Every
accuracy in a card is in percent, as on RobustBench's leaderboard; ACC_norm, RS and RS_mean are ratios.
Cards are written atomically (temp file, then rename), so a crash never leaves half a card.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from arbibench.evaluation.store import hash_indices
from arbibench.faults import fault_point

CARD_VERSION = 1


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100.0 * float(value), 2)


def method_metadata(model_name: str) -> dict[str, Any]:
    """What the zoo knows about ``model_name`` (backbone, method, paper, bit widths); empty for other models."""
    from arbibench.models.methods import get_method
    from arbibench.models.zoo import ZOO, fp_twin_name

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
    }


def card_path(model_info: str | os.PathLike, dataset: str, threat_model: str, name: str) -> Path:
    return Path(model_info) / dataset / threat_model / f"{name}.json"


def replace_atomically(path: Path, tmp: Path, write: Callable[[Path], object], point: str) -> Path:
    """``write(tmp)``, then rename ``tmp`` over ``path``: the old file or the whole new one, never half of one.

    A failed write (disk full, folder not writable) removes ``tmp`` and raises one OSError naming the file and the
    fix; ``point`` is the fault-injection point between writing and renaming (:mod:`arbibench.faults`).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        fault_point(point)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        message = (f"cannot write {path}: {e.strerror or e}; free disk space or make {path.parent} writable (or choose "
                   "another --model-info folder), then rerun: finished batches are read back from the store")
        raise OSError(*((e.errno, message) if e.errno is not None else (message,))) from e
    return path


def write_json_atomic(obj: dict, path: Path) -> Path:
    text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    return replace_atomically(path, path.with_name(path.name + ".tmp"), lambda t: t.write_text(text), "card.write")


def robustbench_header(name: str, dataset: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The identity fields every card starts with, in RobustBench's names (``meta`` from :func:`method_metadata`)."""
    return {
        "card_version": CARD_VERSION,
        "name": name,
        "link": None,
        "authors": meta.get("authors"),
        "additional_data": False,
        "number_forward_passes": 1,
        "dataset": dataset,
        "venue": meta.get("venue"),
        "architecture": meta.get("architecture"),
    }


def protocol_card(result: Any) -> dict[str, Any]:
    """The card of one :class:`~arbibench.protocol_run.ModelEvaluation`."""
    from arbibench.protocol import WHITE_BOX

    p = result.protocol
    meta = method_metadata(result.model_name)
    by_name = {a.name: a for a in result.attacks}
    autoattack = by_name.get("autoattack")
    notes = list(p.notes)
    unreliable = bool(result.flags)
    card = {
        **robustbench_header(result.model_name, p.dataset, meta),
        "eps": p.eps,
        "eps_text": p.eps_text,
        "threat_model": p.threat_model,
        "clean_acc": _pct(result.clean_acc.get(WHITE_BOX)),
        "reported": None,
        "autoattack_acc": _pct(autoattack.acc_star) if autoattack else None,
        "unreliable": unreliable,
        "footnote": "; ".join(notes + [f"flag {k}" for k in result.flags]) or None,
        "method": meta.get("method"),
        "method_paper": meta.get("method_paper"),
        "bits_weights": meta.get("bits_weights"),
        "bits_activations": meta.get("bits_activations"),
        "fp_twin": meta.get("fp_twin"),
        "protocol": p.name,
        "quick": p.quick,
        "clean_acc_by_family": {f: _pct(v) for f, v in result.clean_acc.items()},
        "attacks": {
            a.name: {
                "family": a.family,
                "acc_star": _pct(a.acc_star),
                "acc_norm": round(a.acc_norm, 4),
                "ci_low": _pct(a.interval[0]),
                "ci_high": _pct(a.interval[1]),
                "n_examples": a.n_examples,
                "median_queries": a.median_queries,
                "seconds": round(a.seconds, 2),
            }
            for a in result.attacks
        },
        "rs": {k: round(v, 4) for k, v in result.rs.items()},
        "rs_mean": {k: round(v, 4) for k, v in result.rs_mean.items()},
        "worst_case_acc": _pct(result.worst_case.get("all", result.worst_case.get(WHITE_BOX))),
        "worst_case_by_family": {k: _pct(v) for k, v in result.worst_case.items()},
        "flags": dict(result.flags),
        "data_indices_hash": dict(result.indices_hash),
        "n_examples": dict(result.n_examples),
        "sweep": [
            {**row, "acc_star": _pct(row["acc_star"]), "interval": [_pct(v) for v in row["interval"]]}
            for row in result.sweep
        ],
        # compute time of the attacks as stored batch by batch: the same after a resumed run as after a fresh one
        "seconds": round(sum(a.seconds for a in result.attacks), 1),
        **eps_star_fields(getattr(result, "eps_star", None)),
    }
    return card


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
    from arbibench.attacks import get_attack

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
    tmp = path.with_name(path.stem + ".tmp.npz")
    return replace_atomically(path, tmp, lambda t: np.savez_compressed(t, **arrays), "examples.write")


def write_protocol_card(
    result: Any, model_info: str | os.PathLike, model: nn.Module | None = None, *, data_dir: Any = None,
    device: str | torch.device | None = None,
) -> Path:
    """Write the card (and, given the model, its example images) under ``model_info``; returns the card path."""
    from arbibench.attacks import get_threat_model
    from arbibench.evaluation.benchmark import load_dataset

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
        card["examples"] = examples.name
    return write_json_atomic(card, path)


def eps_star_fields(summary: dict[str, Any] | None) -> dict[str, Any]:
    """Card fields of the minimal-perturbation summary (``MinimalPerturbation.to_dict``); empty when not computed.

    eps* values stay in input units (like ``eps``); the curve's robust accuracy is in percent like every accuracy.
    """
    if summary is None:
        return {}
    return {
        "median_eps_star": summary["median_eps_star"],
        "median_eps_star_ci95": summary["median_eps_star_ci95"],
        "eps_star": {
            "attacks": summary["attacks"],
            "eps_max": summary["eps_max"],
            "search_rounds": summary["search_rounds"],
            "n_examples": summary["n_examples"],
            "not_fooled_up_to_eps_max": _pct(summary["not_fooled_up_to_eps_max"]),
            "curve": [{"eps": row["eps"], "robust_acc": _pct(row["robust_acc"])} for row in summary["curve"]],
        },
    }


def benchmark_card(result: Any) -> dict[str, Any]:
    """The card of a :class:`~arbibench.evaluation.result.BenchmarkResult` (``benchmark(..., to_disk=True)``).

    One subset for every attack, so ACC_norm of both families divides by the same clean accuracy.
    """
    from arbibench.attacks import ATTACKS
    from arbibench.evaluation.result import format_eps
    from arbibench.protocol import BLACK_BOX, WHITE_BOX

    meta = method_metadata(result.model_name)
    d = result.to_dict()

    def family(name: str) -> str:
        cls = ATTACKS.get(name.partition("@")[0])
        return BLACK_BOX if cls is not None and not cls.needs_gradients else WHITE_BOX

    attacks = {}
    for name, m in d["attacks"].items():
        attacks[name] = {
            "family": family(name),
            "acc_star": _pct(m["acc_star"]),
            "acc_norm": round(m["acc_norm"], 4),
            "ci_low": _pct(m["interval"][0]),
            "ci_high": _pct(m["interval"][1]),
            "n_examples": m["n"],
            "median_queries": m.get("median_queries"),
            "seconds": m.get("seconds"),
        }
    rs: dict[str, float] = {}
    rs_mean: dict[str, float] = {}
    for fam in (WHITE_BOX, BLACK_BOX):
        norms = [a["acc_norm"] for a in attacks.values() if a["family"] == fam]
        if norms:
            rs[fam], rs_mean[fam] = round(sum(norms), 4), round(sum(norms) / len(norms), 4)
    rs["all"], rs_mean["all"] = round(d["rs"], 4), round(d["rs_mean"], 4)
    auto = attacks.get("autoattack")
    return {
        **robustbench_header(result.model_name, result.dataset, meta),
        "eps": result.eps,
        "eps_text": format_eps(result.eps),
        "threat_model": result.threat_model,
        "clean_acc": _pct(d["acc"]),
        "reported": None,
        "autoattack_acc": auto["acc_star"] if auto else None,
        "unreliable": bool(result.flags),
        "footnote": "; ".join(list(result.notes) + [f"flag {k}" for k in result.flags]) or None,
        "method": meta.get("method"),
        "method_paper": meta.get("method_paper"),
        "bits_weights": meta.get("bits_weights"),
        "bits_activations": meta.get("bits_activations"),
        "fp_twin": meta.get("fp_twin"),
        "protocol": None,
        "quick": None,
        "subset": result.subset,
        "attacks": attacks,
        "rs": rs,
        "rs_mean": rs_mean,
        "worst_case_acc": _pct(d["worst_case_acc"]),
        "flags": dict(result.flags),
        "data_indices_hash": {"all": hash_indices(result.indices)},
        "n_examples": {"all": int(len(result.indices))},
        "sweep": [],
        **eps_star_fields(d.get("eps_star")),
    }



def _estimate_pct(e: Any) -> dict[str, float]:
    return {"acc": _pct(e.value), "ci_low": _pct(e.low), "ci_high": _pct(e.high)}


def _estimate_ratio(e: Any) -> dict[str, float] | None:
    return None if e is None else {"value": round(e.value, 4), "ci_low": round(e.low, 4), "ci_high": round(e.high, 4)}


def corruption_card(result: Any) -> dict[str, Any]:
    """The card of one :class:`~arbibench.protocol_corruptions.CorruptionEvaluation`, RobustBench's corruptions
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
    return {
        **robustbench_header(result.model_name, p.dataset, meta),
        "eps": None,
        "threat_model": p.threat_model,
        "clean_acc": _pct(result.clean.value),
        "reported": None,
        "corruptions_acc": _pct(result.mca.value),
        "unreliable": bool(result.flags),
        "footnote": "; ".join(notes),
        "method": meta.get("method"),
        "method_paper": meta.get("method_paper"),
        "bits_weights": meta.get("bits_weights"),
        "bits_activations": meta.get("bits_activations"),
        "fp_twin": meta.get("fp_twin"),
        "protocol": p.name,
        "quick": p.quick,
        "corruptions_source": result.source,
        "corruptions_regenerated": regenerated,
        "corruptions_generator_seed": result.generator_seed,
        "clean_acc_interval": [_pct(result.clean.low), _pct(result.clean.high)],
        "corruptions_acc_interval": [_pct(result.mca.low), _pct(result.mca.high)],
        "corruptions_acc_norm": _estimate_ratio(result.relative_clean),
        "corruptions_acc_vs_fp_twin": _estimate_ratio(result.relative_fp),
        "corruptions": {
            name: {
                **_estimate_pct(result.corruption[name]),
                "severities": {str(s): _estimate_pct(e) for s, e in result.cells[name].items()},
            }
            for name in p.corruptions
        },
        "flags": dict(result.flags),
        "data_indices_hash": {"all": result.indices_hash},
        "n_examples": {"per_cell": result.n_examples},
        "seconds": round(result.seconds, 1),
    }


def write_corruption_card(result: Any, model_info: str | os.PathLike) -> Path:
    """Write the corruptions card under ``model_info/<dataset>/corruptions/``; returns its path."""
    path = card_path(model_info, result.protocol.dataset, result.protocol.threat_model, result.model_name)
    return write_json_atomic(corruption_card(result), path)
