"""Pooled black-box batches: several store batches share each forward batch, and the store holds exactly the rows
of the unpooled run (same seed, same numbers), budgets included, also after a resume."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arbibench.attacks import Linf, get_attack
from arbibench.data import load_cifar10
from arbibench.evaluation import runner
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import Outcomes, ResultStore
from arbibench.models.zoo import load_model
from arbibench.protocol import BLACK_BOX, AttackSpec, get_protocol
from arbibench.protocol.run import protocol_subsets, run_model

SETTINGS = {
    "square": {"max_queries": 40},
    "simba": {"max_queries": 30},
    "nes": {"max_queries": 21, "samples": 4},
    "hsja": {"max_queries": 30},
    "rays": {"max_queries": 30},
}


def _run(tmp: Path, name: str, pool: bool, x, y, idx) -> Outcomes:  # type: ignore[no-untyped-def]
    store = ResultStore(tmp / f"{name}-{pool}.sqlite")
    attack = get_attack(name, **SETTINGS[name])
    _, per, _, _ = evaluate(
        load_model("resnet20_bnn"), x, y, idx, attacks=[attack], threat=Linf(8 / 255), batch_size=6,
        store=store, progress=False, checks=False, pool=pool, seed=3,
    )
    return per[name]


def _same(a: Outcomes, b: Outcomes) -> None:
    for field in ("sample_index", "clean_correct", "adv_correct", "perturbation", "queries"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_pooled_rows_equal_unpooled(
    name: str, tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a pool of one store batch's rows: later batches join only as earlier ones finish, the path that needs care
    monkeypatch.setattr(runner, "POOL_ROWS", 6)
    x, y, idx = load_cifar10(24, data_dir=data_dir)
    pooled, plain = _run(tmp_path, name, True, x, y, idx), _run(tmp_path, name, False, x, y, idx)
    _same(pooled, plain)
    budget = SETTINGS[name]["max_queries"]
    attacked = pooled.clean_correct
    assert attacked.any() and bool((pooled.queries[attacked] <= budget).all())
    assert bool((pooled.queries[attacked] >= 1).all())


def test_pooled_run_resumes_to_the_same_rows(tmp_path: Path, data_dir: Path) -> None:
    x, y, idx = load_cifar10(24, data_dir=data_dir)
    full = _run(tmp_path, "square", True, x, y, idx)
    store = ResultStore(tmp_path / "square-True.sqlite")
    with store.conn:  # forget the last two batches, as a run killed before committing them would have
        store.conn.execute("DELETE FROM outcomes WHERE batch_index >= 2")
        store.conn.execute("DELETE FROM batches WHERE batch_index >= 2")
    store.conn.close()
    _same(_run(tmp_path, "square", True, x, y, idx), full)


def test_protocol_run_model_can_run_unpooled_with_the_same_rows(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    protocol = replace(
        get_protocol("cifar10", quick=True),
        attacks=(AttackSpec("square", BLACK_BOX, (("max_queries", 40),)),),
        n_white_box=40,
        n_black_box=12,
        batch_size=4,
    )
    subsets = protocol_subsets(protocol, data_dir)
    pooled_calls: list[int] = []
    real = runner._run_pooled

    def spy(*args: Any, **kwargs: Any) -> None:
        pooled_calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(runner, "_run_pooled", spy)
    model = load_model("resnet20_bnn")
    rows = {}
    for pool in (False, True):
        pooled_calls.clear()
        path = tmp_path / f"pool-{pool}.sqlite"
        with ResultStore(path) as store:
            run_model(model, "resnet20_bnn", protocol, store, subsets, progress=False, sweep=False, pool=pool)
        assert bool(pooled_calls) == pool
        with sqlite3.connect(path) as conn:
            rows[pool] = conn.execute("SELECT * FROM outcomes ORDER BY eval_key, sample_index").fetchall()
    assert len(rows[True]) == 2 * 12  # the clean pass and square on the 12 black-box images
    assert rows[False] == rows[True]


def test_pooled_batches_store_seconds_that_add_up_to_the_wall_time(tmp_path: Path, data_dir: Path) -> None:
    """Pooled batches overlap; each stores its share (time since the previous commit), so an attack's stored
    seconds add up to its wall time instead of counting the shared forward passes once per batch."""
    import time

    x, y, idx = load_cifar10(24, data_dir=data_dir)
    start = time.perf_counter()
    _run(tmp_path, "square", True, x, y, idx)  # 4 store batches of 6, pooled together
    wall = time.perf_counter() - start
    store = ResultStore(tmp_path / "square-True.sqlite")
    key = store.conn.execute("SELECT eval_key FROM evaluations WHERE attack = 'square'").fetchone()[0]
    seconds = [s for (s,) in store.conn.execute("SELECT seconds FROM batches WHERE eval_key = ?", (key,))]
    assert len(seconds) == 4 and all(s >= 0 for s in seconds)
    assert 0 < sum(seconds) <= wall  # each batch's own start-to-commit time summed to more than the run took
