"""The model zoo: a registry of named checkpoints, verified loading, and export of trained runs with model cards.

Every entry names its backbone, method, dataset, checkpoint file and sha256; loading is the same code path for every
name, and what it checks comes from the entry's fields alone. Checkpoints are safetensors (no pickle), their tensor
names and shapes must be the architecture's, and a checkpoint whose sha256 differs from its entry's is refused.

An entry with ``sha256=None`` is *not shipped*: arbibench registers the architecture and method (the ImageNet
ResNet-18s, too large to train on a CPU and to ship), and :func:`load_model` reads the user's own
``<name>.safetensors`` from ``model_dir`` with the same structural checks.

A *user model folder* (``model_dir``, default ``$ARBIBENCH_MODELS`` or ``~/.cache/arbibench/models``) also holds
models imported from the papers' own checkpoints (``arbibench import``): ``<name>.safetensors`` plus the card
``<name>.json`` naming its source, backbone, method, dataset and sha256. Such a name loads like a zoo name, its
sha256 taken from the card and checked.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from arbibench.cards import SHIPPED_CHECKPOINTS, CheckpointCard, shipped_sha256
from arbibench.files import sha256_file as sha256_file  # re-exported: callers import it from the zoo
from arbibench.models.architectures import build_model
from arbibench.models.layout import with_layout
from arbibench.models.methods import METHODS

CHECKPOINT_DIR = SHIPPED_CHECKPOINTS


class ChecksumError(ValueError):
    """A checkpoint's bytes are not the ones its registry entry / model card names."""


@dataclass(frozen=True)
class ZooEntry:
    name: str
    arch: str
    method: str
    dataset: str
    sha256: str | None  # of the safetensors file; None: not shipped, the user supplies the file
    source: str | None = None  # the importer of a model imported into a user folder; None: a zoo entry
    training: str = "standard"  # or "adversarial": its FP twin is the adversarially trained FP model

    @property
    def filename(self) -> str:
        return f"{self.name}.safetensors"

    @property
    def shipped(self) -> bool:
        """Whether arbibench ships (and so pins the sha256 of) this checkpoint."""
        return self.sha256 is not None and self.source is None


# Every shipped CIFAR-10 checkpoint, from checkpoints/SHA256SUMS (a retrained file is pinned there by `arbibench zoo
# pin`; the checkpoint card written by `arbibench train --export` holds the same hash). A name is <arch>_<method>,
# with "_at" for adversarial training at Linf 8/255 (`arbibench train --recipe at`): resnet20_bireal_at, resnet18_bnn.
_PINS = shipped_sha256()
AT_NAME_SUFFIX = "_at"


def pinned_entry(name: str, sha256: str) -> ZooEntry:
    """The registry entry of the pinned CIFAR-10 checkpoint ``name``, its backbone and method read off the name."""
    adversarial = name.endswith(AT_NAME_SUFFIX)
    arch, _, method = name.removesuffix(AT_NAME_SUFFIX).partition("_")
    return ZooEntry(name, arch, method, "cifar10", sha256=sha256,
                    training="adversarial" if adversarial else "standard")


ZOO: dict[str, ZooEntry] = {name: pinned_entry(name, sha) for name, sha in _PINS.items()}

# ImageNet ResNet-18 for every method preset: registered, not shipped; load_model reads the user's file.
ZOO.update(
    (e.name, e)
    for e in (
        ZooEntry(f"resnet18_imagenet_{method}", "resnet18_imagenet", method, "imagenet", sha256=None)
        for method in METHODS
    )
)

PICKLE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl")
MAX_LISTED_KEYS = 5


def user_model_dir() -> Path:
    """The default user model folder: ``$ARBIBENCH_MODELS``, else ``~/.cache/arbibench/models``."""
    env = os.environ.get("ARBIBENCH_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "arbibench" / "models"


def imported_entry(name: str, model_dir: str | os.PathLike[str] | None = None) -> ZooEntry | None:
    """The entry of a model imported into ``model_dir`` (default: the user model folder), from its card; or None."""
    card_path = Path(model_dir or user_model_dir()) / f"{name}.json"
    if not card_path.is_file():
        return None
    try:
        card = json.loads(card_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"model card {card_path} is not valid JSON ({e}); re-import the model") from e
    if not isinstance(card, dict) or "source" not in card:
        return None
    missing = [k for k in ("architecture", "method", "dataset", "sha256") if k not in card]
    if missing:
        raise ValueError(f"model card {card_path} lacks {', '.join(missing)}; re-import the model")
    return ZooEntry(name, card["architecture"], card["method"], card["dataset"], card["sha256"], source=card["source"])


def imported_entries(model_dir: str | os.PathLike[str] | None = None) -> list[ZooEntry]:
    """Every model imported into ``model_dir`` (default: the user model folder), by name."""
    folder = Path(model_dir or user_model_dir())
    if not folder.is_dir():
        return []
    found = (imported_entry(p.stem, folder) for p in sorted(folder.glob("*.json")))
    return [e for e in found if e is not None and e.name not in ZOO]


def fp_twin_name(entry: ZooEntry) -> str | None:
    """The zoo's full-precision model with ``entry``'s backbone, dataset and training (standard or adversarial)."""
    twins = sorted(
        e.name
        for e in ZOO.values()
        if e.arch == entry.arch and e.dataset == entry.dataset and e.method == "fp" and e.training == entry.training
    )
    return twins[0] if twins else None


def zoo_datasets() -> list[str]:
    """The datasets the zoo has models for."""
    return sorted({e.dataset for e in ZOO.values()})


def get_entry(name: str, dataset: str = "cifar10", model_dir: str | os.PathLike[str] | None = None) -> ZooEntry:
    """The entry ``name`` of ``dataset`` (a zoo name, or a model imported into ``model_dir``), or one ValueError
    listing the models known for that dataset."""
    entry = ZOO.get(name) or imported_entry(name, model_dir)
    if entry is None or entry.dataset != dataset:
        names = [n for n, e in ZOO.items() if e.dataset == dataset]
        names += [e.name for e in imported_entries(model_dir) if e.dataset == dataset]
        known = ", ".join(sorted(names))
        if not known:
            known = f"none (datasets with models: {', '.join(zoo_datasets())})"
        hint = f" (it is a model of {entry.dataset!r}: pass dataset={entry.dataset!r})" if entry is not None else ""
        raise ValueError(f"unknown model {name!r} for dataset {dataset!r}{hint}; known models: {known}")
    return entry


def load_card(name: str, model_dir: str | os.PathLike[str] | None = None) -> CheckpointCard:
    """The checkpoint card of ``name`` in ``model_dir`` (default: the shipped checkpoints')."""
    path = Path(model_dir or CHECKPOINT_DIR) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint card {path} for {name!r}")
    return CheckpointCard.read(path)


def _missing_checkpoint_message(entry: ZooEntry, path: Path) -> str:
    # the user's weights go into a folder of their own, named on the command line or in Python; never into the
    # installed package, which an upgrade replaces and which may not be writable
    folder = "--model-dir DIR (Python: model_dir=DIR)"
    if entry.shipped:
        how = (
            f"it ships with arbibench (reinstall it), or train it with "
            f"`arbibench train --arch {entry.arch} --method {entry.method} --export`, or pass {folder} with DIR the "
            f"folder holding {entry.filename}."
        )
    else:
        where = (f"{entry.filename} in a folder of your own, then pass {folder}" if path.parent == CHECKPOINT_DIR
                 else str(path))
        how = (
            f"arbibench does not ship these {entry.dataset} weights. Save your trained {entry.arch} / {entry.method} "
            f"weights as a safetensors state dict (safetensors.torch.save_file(model.state_dict(), path)) as {where}."
        )
    pickled = [path.with_suffix(suffix).name for suffix in PICKLE_SUFFIXES if path.with_suffix(suffix).is_file()]
    if pickled:
        how += f" Found {', '.join(pickled)} there: pickle checkpoints are not loaded, convert to safetensors."
    return f"checkpoint {path} for {entry.name!r} is missing; {how}"


def entry_folder(entry: ZooEntry, model_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where ``entry``'s checkpoint is looked up: ``model_dir``, else the user folder (imported) or the package's."""
    return Path(model_dir or (user_model_dir() if entry.source else CHECKPOINT_DIR))


def verified_checkpoint(entry: ZooEntry, model_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of ``entry``'s checkpoint after checking it exists and, when the entry pins one, its sha256."""
    path = entry_folder(entry, model_dir) / entry.filename
    if not path.is_file():
        raise FileNotFoundError(_missing_checkpoint_message(entry, path))
    if entry.sha256 is not None:
        got = sha256_file(path)
        if got != entry.sha256 and entry.source is not None:
            raise ChecksumError(
                f"checkpoint {path} has sha256 {got} but its model card {entry.name}.json records {entry.sha256}: "
                f"the file is corrupt or was replaced. Import it again (arbibench import --from {entry.source} ...)."
            )
        if got != entry.sha256:
            raise ChecksumError(
                f"checkpoint {path} has sha256 {got} but the zoo registry expects {entry.sha256}: the file is "
                "corrupt or was replaced. Restore it (reinstall arbibench) or retrain and re-export."
            )
    return path


def _listed(keys: list[str]) -> str:
    shown = ", ".join(keys[:MAX_LISTED_KEYS])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > MAX_LISTED_KEYS else "")


def read_checkpoint(
    path: str | os.PathLike[str], model: torch.nn.Module, what: str = "the model"
) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, after checking their names and shapes are ``model``'s state dict's.

    Raises ValueError for a file that is not safetensors (a pickle from ``torch.save`` included: it is never
    unpickled) and for missing, unexpected or mis-shaped tensors, listing the first few of each.
    """
    try:
        tensors = load_file(str(path))
    except SafetensorError as e:
        raise ValueError(
            f"{path} is not a safetensors file ({e}). arbibench loads only safetensors, never pickle: convert a "
            "torch.save checkpoint with safetensors.torch.save_file(state_dict, path)."
        ) from e
    expected = model.state_dict()
    missing = [k for k in expected if k not in tensors]
    unexpected = [k for k in tensors if k not in expected]
    mismatched = [
        f"{k} (file {tuple(tensors[k].shape)}, model {tuple(v.shape)})"
        for k, v in expected.items()
        if k in tensors and tensors[k].shape != v.shape
    ]
    problems = [
        f"{label}: {_listed(keys)}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched))
        if keys
    ]
    if problems:
        raise ValueError(f"{path} does not hold the state dict of {what}: " + "; ".join(problems))
    return tensors


def load_model(
    model_name: str,
    model_dir: str | os.PathLike[str] | None = None,
    dataset: str = "cifar10",
    *,
    device: str | torch.device | None = None,
    channels_last: bool | None = None,
) -> torch.nn.Module:
    """Load a zoo model by name, in eval mode on ``device`` (default CPU).

    The checkpoint is ``<model_dir>/<name>.safetensors`` (``model_dir`` defaults to the package's checkpoint folder):
    it must exist, match the entry's sha256 when the entry pins one, be safetensors and hold exactly the tensor
    names and shapes of the entry's architecture and method. ``channels_last=None`` picks the faster layout that
    keeps the model's predictions (:mod:`arbibench.models.layout`: channels-last for a float network on the CPU);
    True or False forces one.
    """
    entry = get_entry(model_name, dataset, model_dir)
    path = verified_checkpoint(entry, model_dir)
    model = build_model(entry.arch, entry.method)
    model.load_state_dict(read_checkpoint(path, model, f"{entry.arch} / {entry.method} ({entry.name!r})"))
    device = device or "cpu"
    return with_layout(model.eval().to(device), entry.method, device, channels_last)


@functools.cache
def parameter_count(arch: str, method: str) -> int:
    """Number of parameters of ``arch`` with ``method`` (built once per pair)."""
    return sum(p.numel() for p in build_model(arch, method).parameters())


def zoo_rows(model_dir: str | os.PathLike[str] | None = None, dataset: str | None = None) -> list[dict[str, Any]]:
    """One row per zoo entry (of ``dataset``, default all), with its card's clean accuracy when the card exists.

    ``shipped`` says whether arbibench ships the checkpoint; ``present`` whether the file is in ``model_dir``;
    ``source`` is the importer of a model imported into ``model_dir`` (default: the user folder), else "arbibench".
    """
    if dataset is not None and dataset not in zoo_datasets():
        raise ValueError(f"unknown dataset {dataset!r}; datasets with models: {', '.join(zoo_datasets())}")
    rows = []
    for entry in [*ZOO.values(), *imported_entries(model_dir)]:
        folder = entry_folder(entry, model_dir)
        if dataset is not None and entry.dataset != dataset:
            continue
        card_path = folder / f"{entry.name}.json"
        card = json.loads(card_path.read_text()) if card_path.is_file() else {}  # a checkpoint or an import card
        rows.append(
            {
                "name": entry.name,
                "dataset": entry.dataset,
                "method": entry.method,
                "arch": entry.arch,
                "params": parameter_count(entry.arch, entry.method),
                "clean_acc": card.get("clean_acc"),
                "training": card.get("training"),
                "shipped": entry.shipped,
                "present": (folder / entry.filename).is_file(),
                "source": entry.source or "arbibench",
            }
        )
    return rows
