"""The typed attack output is what the store records: for a black-box attack on real CIFAR-10 images, each store
batch's query counts and perturbations are the ``AttackOutput`` of that batch (pooled or not), and a white-box
attack's output carries no query counts (nor, for FAB, does its ``min_distance`` reach the store)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from arbibench.attacks import Attack, AttackOutput, Linf, ThreatModel, get_attack
from arbibench.data import load_cifar10
from arbibench.evaluation.batch import batch_generator
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import Outcomes, ResultStore

N, BATCH, SEED = 12, 6, 3
THREAT = Linf(8 / 255)


@pytest.fixture(scope="module")
def images(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return load_cifar10(N, data_dir=data_dir)


def _stored(model: nn.Module, attack: Attack, images: tuple[torch.Tensor, ...], store_path: Path,
            pool: bool) -> tuple[Outcomes, Outcomes]:
    x, y, idx = images
    with ResultStore(store_path) as store:
        clean, per, _, _ = evaluate(model, x, y, idx, attacks=[attack], threat=THREAT, batch_size=BATCH, store=store,
                                    progress=False, checks=False, seed=SEED, pool=pool)
    return clean, per[attack.name]


def _batch_outputs(model: nn.Module, attack: Attack, images: tuple[torch.Tensor, ...],
                   clean: Outcomes) -> list[tuple[slice, np.ndarray, AttackOutput]]:
    """Each store batch's attacked images (a mask over the batch) and the attack's output for them, recomputed."""
    x, y, _ = images
    found = []
    for b, start in enumerate(range(0, N, BATCH)):
        s = slice(start, start + BATCH)
        ok = clean.clean_correct[s]
        out = attack.output(model, x[s][ok], y[s][ok], THREAT, batch_generator(SEED, b))
        found.append((s, ok, out))
    return found


def _distance(threat: ThreatModel, out: AttackOutput, x0: torch.Tensor) -> np.ndarray:
    return threat.distance(out.x_adv, x0).float().numpy()


@pytest.mark.parametrize("name,params", [("hsja", {"max_queries": 40}), ("square", {"max_queries": 30})])
@pytest.mark.parametrize("pool", [True, False])
def test_black_box_output_is_what_the_store_records(
    name: str, params: dict[str, int], pool: bool, trained_fp: nn.Module, images: tuple[torch.Tensor, ...],
    tmp_path: Path,
) -> None:
    attack = get_attack(name, **params)
    clean, stored = _stored(trained_fp, attack, images, tmp_path / "r.db", pool)
    x = images[0]
    for s, ok, out in _batch_outputs(trained_fp, attack, images, clean):
        assert out.queries is not None and out.min_distance is not None
        assert stored.queries[s][ok].tolist() == out.queries.tolist()
        assert (stored.queries[s][~ok] == -1).all()  # not attacked: no query count
        md = out.min_distance.numpy()
        hit = np.isfinite(md)
        # where the attack found an adversarial point (for HSJA possibly beyond eps) the store keeps its distance,
        # elsewhere the distance of the returned images (the originals: 0)
        expected = np.where(hit, md.astype(np.float32), _distance(THREAT, out, x[s][ok]))
        assert np.array_equal(stored.perturbation[s][ok], expected.astype(np.float64))
        with torch.no_grad():
            fooled = (trained_fp(out.x_adv).argmax(1) != images[1][s][ok]).numpy()
        assert np.array_equal(stored.adv_correct[s][ok], ~fooled)
        assert np.array_equal(fooled, hit & (md <= THREAT.eps + 1e-6))  # fooled exactly where found within eps
    assert (stored.queries[clean.clean_correct] >= 1).all()
    if name == "hsja":  # the path where the output's distance, not the returned images', is stored was taken
        assert (stored.perturbation[clean.clean_correct & stored.adv_correct] > THREAT.eps).any()


def test_white_box_output_has_no_query_counts(trained_fp: nn.Module, images: tuple[torch.Tensor, ...],
                                              tmp_path: Path) -> None:
    """FAB knows its smallest perturbation, but a white-box attack's perturbation column stays the distance of the
    images it returned (what stores written before the typed output hold)."""
    attack = get_attack("fab", steps=3)
    clean, stored = _stored(trained_fp, attack, images, tmp_path / "r.db", pool=True)
    x = images[0]
    for s, ok, out in _batch_outputs(trained_fp, attack, images, clean):
        assert out.queries is None and out.min_distance is not None
        assert out.min_distance.shape == (int(ok.sum()),) and out.min_distance.dtype == torch.float64
        assert (stored.queries[s] == -1).all()
        assert np.array_equal(stored.perturbation[s][ok], _distance(THREAT, out, x[s][ok]).astype(np.float64))


def test_empty_batch_output_keeps_its_kind(trained_fp: nn.Module, images: tuple[torch.Tensor, ...]) -> None:
    x, y, _ = images
    for name, queries, distances in (("square", True, True), ("fab", False, True), ("pgd", False, False)):
        out = get_attack(name).output(trained_fp, x[:0], y[:0], THREAT, torch.Generator().manual_seed(0))
        assert out.x_adv.shape == (0, *x.shape[1:])
        assert (out.queries is not None) == queries and (out.min_distance is not None) == distances
