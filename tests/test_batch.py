"""The unit of work: :func:`compute_batch` on one store batch's images gives exactly the rows the runner committed
for that batch (clean pass, a white-box and a pooled black-box attack), which is what lets another process (a Ray
worker) compute a batch for the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from arbibench.attacks import Linf, get_attack
from arbibench.data import load_cifar10
from arbibench.evaluation.batch import compute_batch, layout
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore
from arbibench.models.zoo import load_model

N, BATCH = 40, 20


def test_compute_batch_gives_the_committed_rows(tmp_path: Path, data_dir: Path) -> None:
    x, y, idx = load_cifar10(N, data_dir=data_dir)
    model = load_model("resnet20_bnn")
    attacks = [get_attack("pgd", steps=3), get_attack("square", max_queries=30)]
    threat = Linf(8 / 255)
    with ResultStore(tmp_path / "r.db") as store:
        clean, per, _, _ = evaluate(model, x, y, idx, attacks=attacks, threat=threat, batch_size=BATCH, store=store,
                                    progress=False, checks=False, seed=5)  # black-box batches pooled (the default)
    assert per["square"].queries[clean.clean_correct].min() >= 1  # the black-box rows carry query counts
    for attack in [None, *attacks]:
        stored = clean if attack is None else per[attack.name]
        for b, start in enumerate(range(0, N, BATCH)):
            s = slice(start, start + BATCH)
            clean_b = None if attack is None else torch.from_numpy(clean.clean_correct[s])
            out = compute_batch(model, attack, threat, 5, b, x[s], y[s], clean_b, torch.device("cpu"), oracle=model)
            assert out.batch_index == b
            assert out.clean_correct == stored.clean_correct[s].tolist()
            assert out.adv_correct == stored.adv_correct[s].tolist()
            assert np.array_equal(np.asarray(out.perturbation, np.float64), stored.perturbation[s])
            queries = [-1 if q is None else q for q in (out.queries or [None] * BATCH)]
            assert queries == stored.queries[s].tolist()


def test_layout_names_dtype_shape_and_strides(data_dir: Path) -> None:
    x, _, _ = load_cifar10(4, data_dir=data_dir)
    assert layout(x) == ("torch.float32", (4, 3, 32, 32), (3072, 1024, 32, 1))
    assert layout(x.to(memory_format=torch.channels_last)) != layout(x)  # the check a worker runs can fail
