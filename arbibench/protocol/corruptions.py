"""Running the common-corruptions preset: each model's accuracy on every CIFAR-10-C cell, through the result store.

Every (model, corruption, severity) is one stored evaluation, keyed by the model's weights, the cell's bytes
(sha256), the dataset indices and the batch size; each batch of predictions is committed with its per-image
outcomes (``clean_correct`` = ``adv_correct`` = the prediction on the corrupted image is right, ``perturbation`` = the
L2 distance of the corrupted image to the clean one), so an interrupted run resumes and a rerun only reads back.
The clean images are one more evaluation. A regenerated folder and the official files have different bytes, hence
different keys, and every result carries its data source.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.clock import active_clock
from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.data.cifar10c import cifar10c_dir, read_cell, read_labels, read_manifest
from arbibench.evaluation.cards import checkpoint_sha256
from arbibench.evaluation.corruption_metrics import Estimate, mean_corruption_accuracy, relative_accuracy
from arbibench.evaluation.inputs import check_model
from arbibench.evaluation.runner import make_progress
from arbibench.evaluation.store import ResultStore, hash_indices, hash_model
from arbibench.machine import computed_on, provenance
from arbibench.models.zoo import ZOO, fp_twin_name, get_entry, load_model
from arbibench.protocol.presets import CorruptionProtocol

CLEAN = "clean"


@dataclass(frozen=True)
class CorruptionData:
    """What every model of a run shares: where the cells are, which images, their labels and checksums."""

    data_dir: str | os.PathLike[str] | None
    source: str  # "official" or "regenerated"
    manifest: dict[str, Any] | None
    n_examples: int
    clean: np.ndarray  # uint8 [n, 32, 32, 3]
    labels: np.ndarray  # int64 [n]
    indices: np.ndarray  # CIFAR-10 test-set positions
    cell_sha256: dict[tuple[str, int], str]

    def cell(self, corruption: str, severity: int) -> np.ndarray:
        return read_cell(corruption, severity, self.data_dir, self.n_examples)[0]

    def digest(self) -> str:
        """One sha256 over every measured cell's: what a card names so that two cards say whether they measured the
        same images (regenerated sets from different generator versions differ)."""
        lines = "".join(f"{c} {s} {h}\n" for (c, s), h in sorted(self.cell_sha256.items()))
        return hashlib.sha256(lines.encode()).hexdigest()


def prepare_data(protocol: CorruptionProtocol, data_dir: str | os.PathLike[str] | None) -> CorruptionData:
    """Check the CIFAR-10-C folder against the clean test set and fingerprint every cell (one pass over the data)."""
    folder = cifar10c_dir(data_dir)
    manifest = read_manifest(folder)
    labels_c, block = read_labels(data_dir)
    n = block if protocol.n_examples is None else protocol.n_examples
    if n > block:
        raise ValueError(f"protocol {protocol.label} needs {n} images per cell but {folder} holds {block}; "
                         f"regenerate with `arbibench corruptions generate --n-examples {n}`")
    x, y = read_cifar10_arrays("test", data_dir)
    if not np.array_equal(labels_c[:n], y[:n]):
        raise ValueError(f"the labels in {folder} are not those of the first {n} CIFAR-10 test images; the folder "
                         "belongs to another dataset or order. Regenerate or download it again.")
    hashes = {}
    for c in protocol.corruptions:
        for s in protocol.severities:
            hashes[(c, s)] = hashlib.sha256(read_cell(c, s, data_dir, n)[0].tobytes()).hexdigest()
    return CorruptionData(
        data_dir=data_dir,
        source="regenerated" if manifest is not None else "official",
        manifest=manifest,
        n_examples=n,
        clean=np.ascontiguousarray(x[:n].transpose(0, 2, 3, 1)),
        labels=y[:n].astype(np.int64),
        indices=np.arange(n, dtype=np.int64),
        cell_sha256=hashes,
    )


@dataclass
class CorruptionEvaluation:
    """One model under the corruption preset: every cell, the means and ratios, each with a 95% interval."""

    model_name: str
    protocol: CorruptionProtocol
    source: str
    generator_seed: int | None
    n_examples: int
    clean: Estimate
    cells: dict[str, dict[int, Estimate]]
    corruption: dict[str, Estimate]
    mca: Estimate
    relative_clean: Estimate
    indices_hash: str
    seconds: float  # compute time as stored batch by batch: a rerun that only reads back keeps the first run's
    machine: str | None = None  # what computed the batches (arbibench.machine.provenance), whose clock the seconds are
    fp_twin: str | None = None
    data_sha256: str | None = None  # CorruptionData.digest of the cells measured
    relative_fp: Estimate | None = None
    checkpoint_sha256: str | None = None  # of the checkpoint file measured
    flags: dict[str, str] = field(default_factory=dict)
    correct: np.ndarray | None = field(default=None, repr=False)  # bool [C, S, n], for the twin comparison

    @property
    def regenerated(self) -> bool:
        return self.source == "regenerated"


def _to_tensor(x_u8: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x_u8)).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def evaluate_cell(
    model: nn.Module,
    model_hash: str,
    model_name: str,
    store: ResultStore,
    images: np.ndarray,
    data: CorruptionData,
    spec: dict[str, Any],
    label: str,
    *,
    batch_size: int,
    device: torch.device,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, str]:
    """Predictions on one cell (uint8 NHWC ``images``), batch by batch through the store: bool [n] correct, and the
    cell's store key (its batches' compute seconds and machine, whenever they were computed)."""
    key = store.register(model_hash, model_name, label, spec)
    done = store.done_batches(key)
    n = len(images)
    machine = computed_on(device)
    for b, start in enumerate(range(0, n, batch_size)):
        stop = min(n, start + batch_size)
        if b in done:
            if on_batch is not None:
                on_batch(stop - start)
            continue
        t0 = active_clock().now()
        xb = _to_tensor(images[start:stop])
        with torch.no_grad():
            ok = (model(xb.to(device)).argmax(1).cpu() == torch.from_numpy(data.labels[start:stop])).tolist()
        dist = (xb - _to_tensor(data.clean[start:stop])).flatten(1).norm(dim=1).tolist()
        store.commit_batch(key, b, data.indices[start:stop].tolist(), ok, ok, dist, None,
                           seconds=active_clock().now() - t0, machine=machine)
        if on_batch is not None:
            on_batch(stop - start)
    out = store.outcomes(key)
    if len(out.sample_index) != n or not np.array_equal(out.sample_index, data.indices):
        raise RuntimeError(f"the store {store.path} holds {len(out.sample_index)} outcomes for {model_name} {label}, "
                           f"expected {n}: it was modified by hand or by another version; use a fresh --store")
    return out.clean_correct, key


def run_corruption_model(
    model: nn.Module,
    model_name: str,
    protocol: CorruptionProtocol,
    store: ResultStore,
    data: CorruptionData,
    *,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    checkpoint_sha256: str | None = None,
) -> CorruptionEvaluation:
    """Accuracy of ``model`` on the clean images and on every cell of ``protocol`` (resumable through ``store``)."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    model = model.to(dev).eval()
    _, flags = check_model(model, _to_tensor(data.clean[:8]).to(dev))
    model_hash = hash_model(model)
    base = {"indices_hash": hash_indices(data.indices), "n_examples": data.n_examples,
            "batch_size": protocol.batch_size}
    cells = [(c, s) for c in protocol.corruptions for s in protocol.severities]
    correct = np.zeros((len(protocol.corruptions), len(protocol.severities), data.n_examples), dtype=bool)
    with make_progress(console, progress) as bar:
        task = bar.add_task(model_name[:10], total=data.n_examples * (len(cells) + 1))

        def advance(k: int) -> None:
            bar.advance(task, k)

        clean_spec = {**base, "dataset": protocol.dataset, "attack": CLEAN,
                      "data_sha256": hashlib.sha256(data.clean.tobytes()).hexdigest()}
        clean, clean_key = evaluate_cell(model, model_hash, model_name, store, data.clean, data, clean_spec, CLEAN,
                                         batch_size=protocol.batch_size, device=dev, on_batch=advance)
        keys = [clean_key]
        for i, c in enumerate(protocol.corruptions):
            for j, s in enumerate(protocol.severities):
                spec = {**base, "dataset": "cifar10-c", "corruption": c, "severity": s, "source": data.source,
                        "data_sha256": data.cell_sha256[(c, s)]}
                correct[i, j], key = evaluate_cell(model, model_hash, model_name, store, data.cell(c, s), data,
                                                   spec, f"{c}@{s}", batch_size=protocol.batch_size, device=dev,
                                                   on_batch=advance)
                keys.append(key)
    by_machine = store.machine_seconds(keys)
    summary = mean_corruption_accuracy(correct, clean, n_boot=protocol.n_bootstrap, seed=protocol.bootstrap_seed)
    return CorruptionEvaluation(
        model_name=model_name,
        protocol=protocol,
        source=data.source,
        generator_seed=None if data.manifest is None else data.manifest.get("seed"),
        data_sha256=data.digest(),
        n_examples=data.n_examples,
        clean=summary["clean"],
        cells={c: dict(zip(protocol.severities, summary["cells"][i], strict=True))
               for i, c in enumerate(protocol.corruptions)},
        corruption=dict(zip(protocol.corruptions, summary["corruption"], strict=True)),
        mca=summary["mca"],
        relative_clean=summary["relative_clean"],
        indices_hash=hash_indices(data.indices),
        seconds=sum(by_machine.values()),
        machine=provenance(by_machine) or computed_on(dev),
        flags=flags,
        correct=correct,
        checkpoint_sha256=checkpoint_sha256,
    )


def fp_twin_of(model_name: str) -> str | None:
    """The zoo's full-precision model with the same backbone and dataset (None for an FP model or a stranger)."""
    entry = ZOO.get(model_name)
    if entry is None or entry.method == "fp":
        return None
    twin = fp_twin_name(entry)
    return None if twin == model_name else twin


def add_fp_ratios(results: Sequence[CorruptionEvaluation]) -> None:
    """Each BNN's mCA over its FP twin's, paired on the same images, when both are in ``results``."""
    by_name = {r.model_name: r for r in results}
    for r in results:
        twin = fp_twin_of(r.model_name)
        reference = None if twin is None or twin not in by_name else by_name[twin].correct
        if twin is None or r.correct is None or reference is None:
            continue
        r.fp_twin = twin
        r.relative_fp = relative_accuracy(r.correct, reference, n_boot=r.protocol.n_bootstrap,
                                          seed=r.protocol.bootstrap_seed)


def run_corruption_protocol(
    protocol: CorruptionProtocol,
    models: Sequence[str],
    store: ResultStore,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    console: Console | None = None,
    progress: bool = True,
    with_twins: bool = True,
    on_model_done: Callable[[CorruptionEvaluation], None] | None = None,
) -> list[CorruptionEvaluation]:
    """Evaluate the zoo models ``models`` on CIFAR-10-C; ``with_twins`` adds each BNN's FP twin when it is missing
    (the BNN-to-FP ratio needs it). ``on_model_done`` gets each result once its FP ratio is known."""
    names = list(dict.fromkeys(models))
    for name in list(names):
        get_entry(name, protocol.dataset, model_dir)  # fail on a bad name before the work, not after
        twin = fp_twin_of(name)
        if with_twins and twin is not None and twin not in names:
            names.insert(0, twin)
    names.sort(key=lambda n: fp_twin_of(n) is not None)  # FP models first, so each BNN's ratio is ready with it
    data = prepare_data(protocol, data_dir)
    results: list[CorruptionEvaluation] = []
    for name in names:
        model = load_model(name, model_dir, protocol.dataset, device=device)
        result = run_corruption_model(model, name, protocol, store, data, device=device, console=console,
                                      progress=progress,
                                      checkpoint_sha256=checkpoint_sha256(name, protocol.dataset, model_dir))
        results.append(result)
        add_fp_ratios(results)
        if on_model_done is not None:
            on_model_done(result)
    return results
