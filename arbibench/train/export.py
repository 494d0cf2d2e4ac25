"""Export of a finished run into the zoo: the weights and their *checkpoint card*.

Two documents are called cards in arbibench. The checkpoint card (``models/checkpoints/<name>.json``, written here)
says what the weights are: method, recipe, training history, validation selection, sha256, and the versions it
replaced. The protocol's *model card* (``model_info/<dataset>/<threat>/<name>.json``, written by
:mod:`arbibench.protocol.cards`) says how robust they are. Export copies the weights atomically and keeps every replaced
version in ``previous_versions``, so a card can never silently name weights that are gone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from arbibench.files import atomic_write, atomic_write_json, sha256_file
from arbibench.machine import describe
from arbibench.models.architectures import build_model
from arbibench.models.methods import get_method
from arbibench.models.published import published_figure
from arbibench.models.zoo import CHECKPOINT_DIR
from arbibench.nn.layers import count_binary_layers


def _previous_versions(card_path: Path, new_sha256: str) -> list[dict[str, Any]]:
    """The versions a re-export replaces (oldest first): sha256, clean accuracy and recipe of each earlier card."""
    if not card_path.is_file():
        return []
    old = json.loads(card_path.read_text())
    versions = list(old.get("previous_versions", []))
    if old.get("sha256") != new_sha256:
        versions.append(
            {k: old.get(k) for k in ("sha256", "clean_acc", "clean_acc_n_examples", "recipe", "train_time_s")}
        )
    return versions


def export_checkpoint(
    run_dir: str | os.PathLike[str], name: str, zoo_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Copy a finished run's weights into the zoo folder and write its checkpoint card; returns the card path."""
    run_dir, zoo = Path(run_dir), Path(zoo_dir or CHECKPOINT_DIR)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no summary.json: the run has not finished")
    summary = json.loads(summary_path.read_text())
    recipe = summary["recipe"]
    zoo.mkdir(parents=True, exist_ok=True)
    weights = zoo / f"{name}.safetensors"
    with open(run_dir / "model.safetensors", "rb") as source:
        atomic_write(lambda f: shutil.copyfileobj(source, f), weights)
    model = build_model(recipe["arch"], recipe["method"])
    method = get_method(recipe["method"])
    card = {
        "name": name,
        "dataset": "cifar10",
        "architecture": recipe["arch"],
        "method": recipe["method"],
        "paper": method.paper,
        "bits_weights": method.bits_weights,
        "bits_activations": method.bits_activations,
        "binary_layers": count_binary_layers(model),
        "params": sum(p.numel() for p in model.parameters()),
        "checkpoint": weights.name,
        "sha256": sha256_file(weights),
        "clean_acc": summary["clean_acc"],
        "clean_acc_n_examples": 10_000,
        "clean_acc_first500": summary["clean_acc_first500"],
        "recipe": recipe,
        "train_time_s": summary["train_time_s"],
        "trained_on": f"{describe(summary['torch_threads'])}, torch {torch.__version__}",
        "history": summary["history"],
    }
    if "epoch_seconds" in summary:  # wall time of each epoch: what a session's budget buys on this machine
        card["epoch_seconds"] = summary["epoch_seconds"]
    if "init_sha256" in summary:
        card["init_sha256"] = summary["init_sha256"]  # the weights recipe.init_from named when the run started
    if "clean_acc_before_bn_recalibration" in summary:
        card["clean_acc_before_bn_recalibration"] = summary["clean_acc_before_bn_recalibration"]
    if "recalibrated_from_sha256" in summary:  # ``arbibench recalibrate``: these weights with new statistics
        card["recalibrated_from_sha256"] = summary["recalibrated_from_sha256"]
    if recipe.get("adversarial"):
        card["training"] = "adversarial"
        card["threat_model"] = {"norm": "Linf", "eps": recipe["adv_eps"]}
    if "robust_check" in summary:
        card["robust_check"] = summary["robust_check"]
    if "validation" in summary:  # held-out selection: split, rule, best epoch, whether the start had seen it
        card["validation"] = summary["validation"]
    figure = published_figure(name)
    if figure is not None and not recipe.get("adversarial"):  # the paper's own figure, its source, the gap
        gap = figure.gap(summary["clean_acc"])
        card["published"] = {**figure.as_card(), "gap": None if gap is None else round(gap, 4)}
    card_path = zoo / f"{name}.json"
    card["previous_versions"] = _previous_versions(card_path, card["sha256"])
    atomic_write_json(card, card_path)
    return card_path
