"""A store written by an earlier arbibench is read back by today's code without recomputing anything.

``tests/data/store_9fcc1ea.db`` was written by commit 9fcc1ea (before attacks returned a typed output) with the
evaluation below: resnet20_fp on the first 20 real CIFAR-10 test images, white-box, minimum-norm and query
attacks. The weights it evaluated travel beside it (``tests/data/resnet20_fp_9fcc1ea.safetensors``, the zoo's v3 FP
twin): a retrained zoo checkpoint has a new hash and so new keys, and the test is about today's code reading old
rows, not about the zoo's weights. Rerunning it today must find every batch under the same keys, leaving those rows
as they were,
and give the numbers a fresh run computes. The one exception is an attack whose algorithm was revised since
(``Attack.revision``): HSJA now queries the original first, so its results are computed afresh under a new key and
the old ones are left untouched beside them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench import benchmark
from arbibench.attacks import get_attack
from arbibench.evaluation.store import hash_model
from arbibench.models.architectures import build_model
from arbibench.models.layout import with_layout
from arbibench.models.zoo import read_checkpoint

OLD_STORE = Path(__file__).with_name("data") / "store_9fcc1ea.db"
OLD_WEIGHTS = OLD_STORE.with_name("resnet20_fp_9fcc1ea.safetensors")


def old_model() -> nn.Module:
    """The FP twin the old store evaluated, built as the zoo builds resnet20_fp (same class, same state dict)."""
    model = build_model("resnet20", "fp")
    model.load_state_dict(read_checkpoint(OLD_WEIGHTS, model))
    return with_layout(model.eval(), "fp", torch.device("cpu"), None)


def attacks() -> list:
    return [get_attack("fgsm"), get_attack("pgd", steps=5), get_attack("fab_t", steps=5, n_target_classes=2),
            get_attack("square", max_queries=100), get_attack("hsja", max_queries=100)]  # fmt: skip


def run(store: Path, data_dir: Path) -> dict:
    result = benchmark(old_model(), 20, attacks=attacks(), model_name="resnet20_fp", batch_size=10, store=store,
                       data_dir=data_dir, progress=False, checks=False)  # fmt: skip
    return {name: {k: v for k, v in m.items() if k != "seconds"} for name, m in result.to_dict()["attacks"].items()}


def dump(db: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}


def outcome_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT e.eval_key, e.spec, o.sample_index, o.clean_correct, o.adv_correct, o.perturbation, o.queries "
            "FROM outcomes o JOIN evaluations e USING (eval_key) ORDER BY e.eval_key, o.sample_index"
        ).fetchall()


REVISED = {"hsja"}  # attacks with a revision > 0 since the store was written


def test_old_store_is_read_without_recomputation_and_matches_a_fresh_run(tmp_path: Path, data_dir: Path) -> None:
    old = tmp_path / "old.db"
    shutil.copy(OLD_STORE, old)
    before = dump(old)
    assert len(before["evaluations"]) == 6  # the clean pass and five attacks
    # the weights beside the store are the ones it evaluated (the model hash is part of every key)
    assert {r[1] for r in before["evaluations"]} == {hash_model(old_model())}
    read_back = run(old, data_dir)
    after = dump(old)
    # every old row is still there, as it was
    assert all(set(before[t]) <= set(after[t]) for t in before)
    # only the revised attacks were computed: one new evaluation each, with its revision in the spec
    new_evals = [r for r in after["evaluations"] if r not in set(before["evaluations"])]
    assert sorted(r[3] for r in new_evals) == sorted(REVISED)
    assert all(json.loads(r[4])["attack"]["revision"] >= 1 for r in new_evals)
    new_keys = {r[0] for r in new_evals}
    for table in ("batches", "outcomes"):
        assert {r[0] for r in set(after[table]) - set(before[table])} == new_keys

    # A fresh run finds the same keys and the same decisions. A minimum-norm attack's distances are float results of
    # many steps and may differ in the last digits on another CPU (the store was written on an AVX2 machine; an
    # AVX-512 one rounds some reductions differently), so those are compared to a relative 1e-2 (a mean) and 0.1
    # (one image: a different rounding can send FAB down another path to a boundary point 4% farther).
    fresh_db = tmp_path / "fresh.db"
    fresh = run(fresh_db, data_dir)
    assert {n: {k: v for k, v in m.items() if k != "mean_perturbation"} for n, m in read_back.items()} == {
        n: {k: v for k, v in m.items() if k != "mean_perturbation"} for n, m in fresh.items()}
    for name, m in fresh.items():
        assert read_back[name]["mean_perturbation"] == pytest.approx(m["mean_perturbation"], rel=1e-2), name
    fresh_rows = outcome_rows(fresh_db)
    fresh_keys = {r[0] for r in fresh_rows}
    old_rows = [r for r in outcome_rows(old) if r[0] in fresh_keys]
    assert [r[:5] + r[6:] for r in old_rows] == [r[:5] + r[6:] for r in fresh_rows]
    assert [r[5] for r in old_rows] == pytest.approx([r[5] for r in fresh_rows], rel=0.1, abs=1e-6)
