"""Results store: batches are atomic, nothing is counted twice, reopening resumes."""

import sqlite3

import numpy as np
import pytest
import torch

from arbibench.evaluation.store import ResultStore, hash_indices, hash_model
from arbibench.models.resnet import resnet20


def test_commit_and_read_back(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        key = store.register("m", "model", "pgd", {"eps": 0.03})
        store.commit_batch(key, 1, [5, 6], [True, True], [False, True], [0.03, 0.02])
        store.commit_batch(key, 0, [1, 2], [True, False], [True, False], [0.01, 0.0], queries=[10, None])
        out = store.outcomes(key)
    assert out.sample_index.tolist() == [1, 2, 5, 6]
    assert out.clean_correct.tolist() == [True, False, True, True]
    assert out.adv_correct.tolist() == [True, False, False, True]
    assert np.allclose(out.perturbation, [0.01, 0.0, 0.03, 0.02])
    assert out.queries.tolist() == [10, -1, -1, -1]
    with ResultStore(tmp_path / "r.db") as store:  # reopened: the same key finds the same batches
        assert store.register("m", "model", "pgd", {"eps": 0.03}) == key
        assert store.done_batches(key) == {0, 1}


def test_a_batch_is_never_counted_twice(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        key = store.register("m", "model", "pgd", {})
        assert store.commit_batch(key, 0, [1, 2], [True, True], [True, False], [0, 0])
        # the same batch again (another process on this store got there first): kept, not written twice
        assert store.commit_batch(key, 0, [1, 2], [True, True], [True, False], [0, 0]) is False
        assert store.outcomes(key).sample_index.tolist() == [1, 2]
        with pytest.raises(sqlite3.IntegrityError):  # same samples under another batch number
            store.commit_batch(key, 1, [2, 3], [True, True], [True, True], [0, 0])
        # the failed transaction left nothing behind: batch 1 and sample 3 are absent
        assert store.done_batches(key) == {0}
        assert store.outcomes(key).sample_index.tolist() == [1, 2]


def test_contradictory_outcome_is_refused(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        key = store.register("m", "model", "pgd", {})
        with pytest.raises(ValueError, match="cannot count as robust"):
            store.commit_batch(key, 0, [1], [False], [True], [0.0])


def test_spec_changes_the_key(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        a = store.register("m", "model", "pgd", {"eps": 8 / 255})
        b = store.register("m", "model", "pgd", {"eps": 4 / 255})
        c = store.register("other-weights", "model", "pgd", {"eps": 8 / 255})
    assert len({a, b, c}) == 3


def test_not_a_database(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(ValueError, match="not an arbibench result store"):
        ResultStore(bad)


def test_model_and_index_hashes():
    torch.manual_seed(0)
    a, b = resnet20("fp"), resnet20("fp")
    assert hash_model(a) != hash_model(b)
    b.load_state_dict(a.state_dict())
    assert hash_model(a) == hash_model(b)
    assert hash_indices([0, 1, 2]) == hash_indices(np.arange(3))
    assert hash_indices([0, 1, 2]) != hash_indices([0, 1, 3])
