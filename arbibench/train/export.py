"""Export of a finished run into the zoo: the weights and their *checkpoint card*.

Two documents are called cards in arbibench. The checkpoint card (``models/checkpoints/<name>.json``, written here)
says what the weights are: method, recipe, training history, validation selection, sha256, and the versions it
replaced. The protocol's *model card* (``model_info/<dataset>/<threat>/<name>.json``, written by
:mod:`arbibench.protocol.cards`) says how robust they are. Export copies the weights atomically and keeps every replaced
version in ``previous_versions``, so a card can never silently name weights that are gone. A finished run that does
not replace the shipped weights is recorded in the card's ``attempts`` instead (:func:`record_attempt`): its curve
is the evidence of what more training of that recipe did.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from arbibench.cards import CheckpointCard, TrainingAttempt, TrainingThreat
from arbibench.files import atomic_write, atomic_write_json, sha256_file
from arbibench.machine import describe
from arbibench.models.architectures import build_model
from arbibench.models.methods import get_method
from arbibench.models.published import published_figure
from arbibench.models.zoo import CHECKPOINT_DIR
from arbibench.nn.layers import count_binary_layers
from arbibench.train.recipes import AT_SUFFIX


def _kept_from(card_path: Path, new_sha256: str) -> dict[str, Any]:
    """What a re-export keeps of the card it rewrites: the versions it replaces (oldest first: sha256, clean accuracy,
    recipe and history of each earlier card) and the attempts recorded against any of them."""
    if not card_path.is_file():
        return {"previous_versions": ()}
    old = CheckpointCard.read(card_path)
    replaced = (old.replaced(),) if old.sha256 != new_sha256 else ()
    return {"previous_versions": old.previous_versions + replaced, "attempts": old.attempts}


def _training_record(summary: dict[str, Any]) -> dict[str, Any]:
    """The card fields a run's summary gives where it has them: per-epoch seconds, the weights it started from, the
    BatchNorm re-estimation, adversarial training, the robust check and the held-out selection."""
    recipe = summary["recipe"]
    fields: dict[str, Any] = {key: summary.get(key) for key in (
        "init_sha256", "clean_acc_before_bn_recalibration", "recalibrated_from_sha256", "robust_check", "validation")}
    fields["epoch_seconds"] = None if "epoch_seconds" not in summary else tuple(summary["epoch_seconds"])
    if recipe.get("adversarial"):
        fields["training"] = "adversarial"
        fields["threat_model"] = TrainingThreat(norm="Linf", eps=recipe["adv_eps"])
    figure = published_figure(summary["name"])
    if figure is not None and not recipe.get("adversarial"):  # the paper's own figure, its source, the gap
        gap = figure.gap(summary["clean_acc"])
        fields["published"] = {**figure.as_card(), "gap": None if gap is None else round(gap, 4)}
    return fields


def _run_summary(run_dir: Path) -> dict[str, Any]:
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no summary.json: the run has not finished")
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary


def record_attempt(
    run_dir: str | os.PathLike[str], name: str, zoo_dir: str | os.PathLike[str] | None = None
) -> TrainingAttempt | None:
    """Append a finished run that did not replace the shipped ``name`` to that card's ``attempts``; returns the
    record, or None when the card already holds it (recording twice changes nothing)."""
    run_dir, zoo = Path(run_dir), Path(zoo_dir or CHECKPOINT_DIR)
    summary = _run_summary(run_dir)
    recipe = summary["recipe"]
    trained = f"{recipe['arch']}_{recipe['method']}{AT_SUFFIX if recipe.get('adversarial') else ''}"
    if trained != name:
        raise ValueError(f"{run_dir} trained {trained}, not {name}: name the model the run would have replaced")
    card_path = zoo / f"{name}.json"
    if not card_path.is_file():
        raise FileNotFoundError(f"no checkpoint card {card_path}: a run that replaces nothing is exported "
                                "(arbibench train --export), not recorded as an attempt")
    card = CheckpointCard.read(card_path)
    weights = run_dir / "model.safetensors"
    if weights.is_file() and sha256_file(weights) == card.sha256:
        raise ValueError(f"{run_dir} holds the shipped weights of {name}: that run replaced it, it is no attempt")
    val = summary.get("validation") or {}
    shipped_val = (val.get("shipped") or {}).get("val_acc", val.get("init_val_acc"))
    attempt = TrainingAttempt(
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"), compared_with=card.sha256, recipe=summary["recipe"],
        history=tuple(summary["history"]), train_time_s=summary.get("train_time_s"),
        trained_on=f"{describe(summary['torch_threads'])}, torch {torch.__version__}"
        if "torch_threads" in summary else None,
        clean_acc=summary.get("clean_acc"), val_examples=val.get("examples"), val_acc=val.get("val_acc"),
        shipped_val_acc=shipped_val,
    )
    same_run = [a for a in card.attempts or () if (a.recipe, a.history) == (attempt.recipe, attempt.history)]
    if same_run:
        return None
    atomic_write_json(replace(card, attempts=(*(card.attempts or ()), attempt)).to_dict(), card_path)
    return attempt


def export_checkpoint(
    run_dir: str | os.PathLike[str], name: str, zoo_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Copy a finished run's weights into the zoo folder and write its checkpoint card; returns the card path."""
    run_dir, zoo = Path(run_dir), Path(zoo_dir or CHECKPOINT_DIR)
    summary = _run_summary(run_dir)
    recipe = summary["recipe"]
    zoo.mkdir(parents=True, exist_ok=True)
    weights = zoo / f"{name}.safetensors"
    with open(run_dir / "model.safetensors", "rb") as source:
        atomic_write(lambda f: shutil.copyfileobj(source, f), weights)
    model = build_model(recipe["arch"], recipe["method"])
    method = get_method(recipe["method"])
    card_path = zoo / f"{name}.json"
    sha256 = sha256_file(weights)
    card = CheckpointCard(
        name=name, dataset="cifar10", architecture=recipe["arch"], method=recipe["method"], paper=method.paper,
        bits_weights=method.bits_weights, bits_activations=method.bits_activations,
        binary_layers=count_binary_layers(model), params=sum(p.numel() for p in model.parameters()),
        checkpoint=weights.name, sha256=sha256, clean_acc=summary["clean_acc"], clean_acc_n_examples=10_000,
        clean_acc_first500=summary["clean_acc_first500"], recipe=recipe, train_time_s=summary["train_time_s"],
        trained_on=f"{describe(summary['torch_threads'])}, torch {torch.__version__}",
        history=tuple(summary["history"]), **_training_record({**summary, "name": name}),
        **_kept_from(card_path, sha256),
    )
    atomic_write_json(card.to_dict(), card_path)
    return card_path
