"""The model zoo: a registry of named checkpoints, verified loading, and export of trained runs with model cards.

Every entry names its backbone, method, checkpoint file and sha256; loading is the same code path for every name.
Checkpoints are safetensors (no pickle); a checkpoint whose sha256 differs from the registry's is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from arbibench.models.architectures import build_model
from arbibench.models.methods import get_method
from arbibench.nn.layers import count_binary_layers

CHECKPOINT_DIR = Path(__file__).parent / "checkpoints"


class ChecksumError(ValueError):
    """A checkpoint's bytes are not the ones its registry entry / model card names."""


@dataclass(frozen=True)
class ZooEntry:
    name: str
    arch: str
    method: str
    dataset: str
    sha256: str  # of the safetensors file

    @property
    def filename(self) -> str:
        return f"{self.name}.safetensors"


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry(
            "resnet20_fp",
            "resnet20",
            "fp",
            "cifar10",
            sha256="3e01db63dcb13a90a127f6720bf73d46b3fdb78de2b59ea5f35fa03bb0e43dea",
        ),
        ZooEntry(
            "resnet20_bnn",
            "resnet20",
            "bnn",
            "cifar10",
            sha256="3b17d3d05bd36878d9c2491858ec658c25f5d3f6d43e9cd00a5fd12a4407df24",
        ),
    )
}


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def get_entry(name: str, dataset: str = "cifar10") -> ZooEntry:
    entry = ZOO.get(name)
    if entry is None or entry.dataset != dataset:
        known = ", ".join(sorted(n for n, e in ZOO.items() if e.dataset == dataset)) or "none"
        raise ValueError(f"unknown model {name!r} for dataset {dataset!r}; known models: {known}")
    return entry


def load_card(name: str, model_dir: str | os.PathLike | None = None) -> dict:
    path = Path(model_dir or CHECKPOINT_DIR) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no model card {path} for {name!r}")
    return json.loads(path.read_text())


def verified_checkpoint(entry: ZooEntry, model_dir: str | os.PathLike | None = None) -> Path:
    """Path of ``entry``'s checkpoint after checking it exists and its sha256 is the registry's."""
    path = Path(model_dir or CHECKPOINT_DIR) / entry.filename
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint {path} for {entry.name!r} is missing; train it with "
            f"`arbibench train --arch {entry.arch} --method {entry.method} --export` or pass model_dir."
        )
    got = sha256_file(path)
    if got != entry.sha256:
        raise ChecksumError(
            f"checkpoint {path} has sha256 {got} but the zoo registry expects {entry.sha256}: the file is corrupt "
            "or was replaced. Restore it (git checkout / reinstall arbibench) or retrain and re-export."
        )
    return path


def load_model(
    model_name: str,
    model_dir: str | os.PathLike | None = None,
    dataset: str = "cifar10",
    *,
    device: str | torch.device | None = None,
) -> torch.nn.Module:
    """Load a zoo model by name, verified against its sha256, in eval mode on ``device`` (default CPU)."""
    entry = get_entry(model_name, dataset)
    path = verified_checkpoint(entry, model_dir)
    model = build_model(entry.arch, entry.method)
    model.load_state_dict(load_file(str(path)))
    return model.eval().to(device or "cpu")


def zoo_rows(model_dir: str | os.PathLike | None = None) -> list[dict]:
    """One row per zoo entry, with its card's clean accuracy when the card exists."""
    rows = []
    for entry in ZOO.values():
        folder = Path(model_dir or CHECKPOINT_DIR)
        card_path = folder / f"{entry.name}.json"
        card = json.loads(card_path.read_text()) if card_path.is_file() else {}
        model = build_model(entry.arch, entry.method)
        rows.append(
            {
                "name": entry.name,
                "dataset": entry.dataset,
                "method": entry.method,
                "arch": entry.arch,
                "params": sum(p.numel() for p in model.parameters()),
                "clean_acc": card.get("clean_acc"),
                "present": (folder / entry.filename).is_file(),
            }
        )
    return rows


def export_checkpoint(run_dir: str | os.PathLike, name: str, zoo_dir: str | os.PathLike | None = None) -> Path:
    """Copy a finished run's weights into the zoo folder and write its model card; returns the card path."""
    run_dir, zoo = Path(run_dir), Path(zoo_dir or CHECKPOINT_DIR)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no summary.json: the run has not finished")
    summary = json.loads(summary_path.read_text())
    recipe = summary["recipe"]
    zoo.mkdir(parents=True, exist_ok=True)
    weights = zoo / f"{name}.safetensors"
    tmp = weights.with_name(weights.name + ".tmp")
    shutil.copyfile(run_dir / "model.safetensors", tmp)
    os.replace(tmp, weights)
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
        "trained_on": f"{platform.machine()} CPU, {summary['torch_threads']} threads, torch {torch.__version__}",
        "history": summary["history"],
    }
    card_path = zoo / f"{name}.json"
    tmp = card_path.with_name(card_path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(tmp, card_path)
    return card_path
