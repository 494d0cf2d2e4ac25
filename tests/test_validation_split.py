"""Held-out selection: the validation split is never trained on, picks the shipped epoch, stops a stalled run, and a
run killed at an epoch boundary resumes to the same result as an uninterrupted one."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.torch import load_file

import arbibench.train.accuracy as accuracy
from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.train import Recipe, long_recipe, split_validation, train
from arbibench.train.selection import validation_optimistic


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tiny(**kw) -> Recipe:
    base = dict(method="bnn", epochs=3, batch_size=64, train_examples=192, optimizer="adam", lr=1e-3,
                val_examples=100, patience=0)
    return Recipe(**{**base, **kw})


class _InterruptError(Exception):
    pass


def test_the_split_is_the_last_training_images_and_disjoint_from_training(data_dir):
    x, y = read_cifar10_arrays("train", data_dir)
    xt, yt, xv, yv = split_validation(x, y, 5000)
    assert len(yt) == 45_000 and len(yv) == 5000
    assert np.array_equal(xv, x[45_000:]) and np.array_equal(yt, y[:45_000])
    with pytest.raises(ValueError, match="leaves no training images"):
        split_validation(x[:10], y[:10], 10)


def test_the_run_ships_its_best_validation_epoch_and_never_looks_at_the_test_set(tmp_path, data_dir, monkeypatch):
    seen_sizes: list[int] = []
    measure = accuracy.top1_accuracy

    def spy(model, x, y, batch_size=500):
        seen_sizes.append(len(y))
        return measure(model, x, y, batch_size)

    monkeypatch.setattr(accuracy, "top1_accuracy", spy)
    summary = train(_tiny(), tmp_path / "run", data_dir, log=lambda m: None, eval_examples=150)
    history = summary["history"]
    assert all("val_acc" in h and "test_acc_1000" not in h for h in history)
    best = summary["validation"]["best_epoch"]
    assert history[best - 1]["val_acc"] == max(h["val_acc"] for h in history)
    # per epoch only the 100 validation images; the 150 test images are measured once on the selected weights
    # (clean_acc and its first-500 slice, which is the same 150 here)
    assert seen_sizes[:3] == [100, 100, 100]
    assert seen_sizes.count(150) == 2
    shipped = load_file(str(tmp_path / "run" / "model.safetensors"))
    chosen = load_file(str(tmp_path / "run" / "best_val.safetensors"))
    assert all((shipped[k] == chosen[k]).all() for k in chosen)
    assert summary["validation"]["optimistic"] is False  # trained from scratch: the split was never seen


def test_a_stalled_run_stops_after_its_patience(tmp_path, data_dir, monkeypatch):
    # the validation accuracy peaks at epoch 1 and never comes back (the test set, 50 images, is measured for real)
    per_epoch = iter([0.5, 0.4, 0.45, 0.3, 0.3, 0.3])
    measure = accuracy.top1_accuracy
    monkeypatch.setattr(accuracy, "top1_accuracy",
                        lambda model, x, y, batch_size=500: next(per_epoch) if len(y) == 100 else measure(model, x, y))
    summary = train(_tiny(epochs=6, patience=2), tmp_path / "run", data_dir, log=lambda m: None, eval_examples=50)
    assert len(summary["history"]) == 3
    assert summary["validation"]["stopped_early"] is True and summary["validation"]["best_epoch"] == 1
    # rerunning the stopped run reads it back instead of training on
    again = train(_tiny(epochs=6, patience=2), tmp_path / "run", data_dir, log=lambda m: None, eval_examples=50)
    assert again == summary


def test_a_killed_run_resumes_at_the_next_epoch_with_the_same_result(tmp_path, data_dir):
    recipe = _tiny()
    full = train(recipe, tmp_path / "full", data_dir, log=lambda m: None, eval_examples=100)

    def stop_after_second_epoch(msg):
        if msg.startswith("epoch 2:"):
            raise _InterruptError

    with pytest.raises(_InterruptError):
        train(recipe, tmp_path / "resumed", data_dir, log=stop_after_second_epoch, eval_examples=100)
    assert json.loads((tmp_path / "resumed" / "state.json").read_text())["epoch"] == 1
    resumed = train(recipe, tmp_path / "resumed", data_dir, log=lambda m: None, eval_examples=100)
    assert _digest(tmp_path / "full" / "model.safetensors") == _digest(tmp_path / "resumed" / "model.safetensors")
    assert resumed["history"] == full["history"] and resumed["validation"] == full["validation"]


@pytest.mark.parametrize("field,value", [("epochs", 0), ("epochs", -1), ("batch_size", 0), ("val_examples", -5),
                                         ("patience", -1), ("train_examples", 0)])
def test_counts_that_would_train_nothing_are_refused(tmp_path, data_dir, field, value):
    with pytest.raises(ValueError, match=field):
        train(_tiny(**{field: value}), tmp_path / "run", data_dir, log=lambda m: None)
    assert not (tmp_path / "run" / "state.json").exists()


def test_train_epochs_zero_exits_with_one_error(tmp_path, data_dir, monkeypatch):
    from typer.testing import CliRunner

    from arbibench.cli import app

    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    result = CliRunner().invoke(app, ["train", "--method", "fp", "--epochs", "0", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "epochs must be at least 1" in result.output
    assert not any(tmp_path.rglob("*.safetensors"))


def test_the_long_recipe_continues_the_shipped_model_with_held_out_selection():
    r = long_recipe("reactnet")
    assert (r.init_from, r.teacher, r.step1_epochs) == ("resnet20_reactnet", "resnet20_fp", 0)
    assert (r.epochs, r.val_examples, r.patience) == (60, 5000, 8)
    assert long_recipe("bnn").epochs == 30
    assert validation_optimistic("resnet20_reactnet") is True  # it, or the kd model it continues, saw all 50,000
