"""Training is deterministic given a seed and resumes after an interruption to the same weights."""

import hashlib
import json

import pytest
import torch
from safetensors.torch import load_file

from arbibench.models.architectures import build_model
from arbibench.train import Recipe, augment, learning_rate, train
from arbibench.train.loop import latent_binary_weights


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _InterruptError(Exception):
    pass


@pytest.mark.parametrize("channels_last", [False, True])
def test_interrupted_run_resumes_to_identical_weights(tmp_path, data_dir, channels_last):
    # two steps an epoch: the resumed epoch continues the optimiser's state and the schedule mid-run
    recipe = Recipe(method="bnn", epochs=2, batch_size=64, train_examples=128, optimizer="adam", lr=1e-3)
    full = train(recipe, tmp_path / "full", data_dir, log=lambda m: None, eval_examples=100,
                 channels_last=channels_last)

    def stop_after_first_epoch(msg):
        if msg.startswith("epoch 1:"):
            raise _InterruptError

    with pytest.raises(_InterruptError):
        train(recipe, tmp_path / "resumed", data_dir, log=stop_after_first_epoch, eval_examples=100,
              channels_last=channels_last)
    assert json.loads((tmp_path / "resumed" / "state.json").read_text())["epoch"] == 0
    resumed = train(recipe, tmp_path / "resumed", data_dir, log=lambda m: None, eval_examples=100,
                    channels_last=channels_last)
    assert _digest(tmp_path / "full" / "model.safetensors") == _digest(tmp_path / "resumed" / "model.safetensors")
    assert resumed["clean_acc"] == full["clean_acc"]
    assert len(resumed["history"]) == 2
    # each epoch's wall time survives the interruption, beside the history rather than in it
    assert [e["epoch"] for e in resumed["epoch_seconds"]] == [1, 2]
    assert all(e["seconds"] > 0 and e["threads"] >= 1 for e in resumed["epoch_seconds"])
    assert all(e["channels_last"] is channels_last for e in resumed["epoch_seconds"])


LAYOUT_RECIPE = Recipe(method="reactnet", epochs=1, batch_size=64, train_examples=128, optimizer="adam", lr=1e-3)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, data_dir):
    """The default run (eager, contiguous) of LAYOUT_RECIPE, trained once for both variants it is compared with."""
    out = tmp_path_factory.mktemp("plain")
    return out, train(LAYOUT_RECIPE, out, data_dir, log=lambda m: None, eval_examples=100)


@pytest.mark.parametrize("how", ["channels_last", "compile_model"])
def test_layout_and_compile_train_the_same_parameters(tmp_path, data_dir, plain_run, how):
    # Both are how a run computes, not what. Neither is bit-exact: batch statistics sum in another order (and
    # compiled kernels fuse operations), and a BNN's signs amplify that. What must hold: every trained parameter lands
    # within what Adam can move it in the run's steps (at most about lr per step) of the default run's, so no tensor
    # was misread, and the checkpoint has the module's own keys.
    recipe = LAYOUT_RECIPE
    plain_dir, plain = plain_run
    other = train(recipe, tmp_path / "other", data_dir, log=lambda m: None, eval_examples=100, **{how: True})
    assert other["epoch_seconds"][0]["channels_last" if how == "channels_last" else "compiled"] is True
    assert plain["epoch_seconds"][0]["channels_last"] is False and plain["epoch_seconds"][0]["compiled"] is False
    loss_plain, loss_other = plain["history"][0]["train_loss"], other["history"][0]["train_loss"]
    assert abs(loss_other - loss_plain) < 0.05 * loss_plain
    a = load_file(str(plain_dir / "model.safetensors"))
    b = load_file(str(tmp_path / "other" / "model.safetensors"))
    assert a.keys() == b.keys()
    trained = [k for k in a if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    assert max((a[k] - b[k]).abs().max().item() for k in trained) <= 2 * 2 * recipe.lr  # 2 steps, Adam's bound x2
    torch.manual_seed(recipe.seed)  # the run's own initialisation
    init = build_model("resnet20", "reactnet").state_dict()
    assert max((a[k] - init[k]).abs().max().item() for k in trained) > 0  # and the runs did train


@pytest.mark.parametrize(("method", "compiles"), [("reactnet", 1), ("irnet", 3)])
def test_a_scheduled_surrogate_is_compiled_once_per_epoch(tmp_path, data_dir, monkeypatch, method, compiles):
    # IR-Net's EDE changes its surrogate every epoch, so each epoch needs its own graph; dynamo's old graphs are
    # dropped first, or past its recompile limit it would quietly run eager. A model without a schedule compiles once.
    import arbibench.train.loop as loop

    calls = {"compile": 0, "reset": 0}

    def fake_compile(model):
        calls["compile"] += 1
        return model

    monkeypatch.setattr(loop.torch, "compile", fake_compile)
    monkeypatch.setattr(loop.torch._dynamo, "reset", lambda: calls.__setitem__("reset", calls["reset"] + 1))
    recipe = Recipe(method=method, epochs=3, batch_size=64, train_examples=64, optimizer="adam", lr=1e-3)
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=50, compile_model=True)
    assert calls == {"compile": compiles, "reset": compiles}


def test_a_distilled_run_compiles_its_teacher_with_the_student(tmp_path, data_dir, monkeypatch):
    # the FP teacher's forward is a fifth of a distilled step: under --compile it runs compiled too, every step
    import arbibench.train.loop as loop

    calls: dict[str, int] = {}

    def fake_compile(model, **kw):
        kind = "teacher" if not latent_binary_weights(model) else "student"
        calls[kind] = 0

        def forward(x):
            calls[kind] += 1
            return model(x)

        return forward

    monkeypatch.setattr(loop.torch, "compile", fake_compile)
    recipe = Recipe(method="bnn", epochs=1, batch_size=32, train_examples=64, optimizer="adam", lr=1e-3,
                    teacher="resnet20_fp", kd_weight=1.0, ce_weight=0.0)
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=50, compile_model=True)
    assert calls == {"student": 2, "teacher": 2}  # two steps, each through both compiled forwards


def test_a_finished_run_is_read_back_not_recalibrated_again(tmp_path, data_dir):
    recipe = Recipe(method="bnn", epochs=1, batch_size=64, train_examples=128, bn_recalibration_batches=1)
    first = train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=200)
    weights = tmp_path / "run" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns, weights.stat().st_ino
    messages = []
    again = train(recipe, tmp_path / "run", data_dir, log=messages.append, eval_examples=200)
    assert again == first
    assert (weights.stat().st_mtime_ns, weights.stat().st_ino) == stamp  # the weights were not re-estimated
    assert any("is finished" in m for m in messages)
    # measured on another number of test images, the summary is measured again
    other = train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)
    assert other["clean_acc_n_examples"] == 100


def test_resume_refuses_a_different_recipe(tmp_path, data_dir):
    recipe = Recipe(method="fp", epochs=1, batch_size=64, train_examples=64)
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=200)
    recipe.lr = 0.05
    with pytest.raises(ValueError, match="different recipe"):
        train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=200)


def test_augment_crops_and_flips_within_padding():
    gen = torch.Generator().manual_seed(0)
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.int64).reshape(2, 3, 32, 32).to(torch.uint8)
    out = augment(x, gen)
    assert out.shape == x.shape and out.dtype == torch.uint8
    # every output pixel is either padding (0) or a pixel of the same image and channel
    for i in range(2):
        for c in range(3):
            values = set(x[i, c].flatten().tolist()) | {0}
            assert set(out[i, c].flatten().tolist()) <= values


def test_onecycle_schedule_shape():
    r = Recipe(lr=0.2, schedule="onecycle", warmup_fraction=0.1)
    assert learning_rate(r, 0, 100) == 0.0
    assert learning_rate(r, 10, 100) == pytest.approx(0.2)
    assert learning_rate(r, 100, 100) == pytest.approx(0.0, abs=1e-12)


# -- options refused before a run folder exists ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options,says",
    [
        (["--arch", "nosuch"], "--arch 'nosuch' is not a known architecture"),
        (["--lr", "-1"], "--lr (the peak learning rate) must be a positive number, got -1"),
        (["--lr", "nan"], "--lr (the peak learning rate) must be a positive number, got nan"),
        (["--val-examples", "50000"], "--val-examples 50000 leaves no training images"),
        (["--init-from", "nosuch"], "'nosuch' is neither a zoo model name nor an existing checkpoint file"),
        # a second backbone's BNN before its FP twin: the error names the run that makes the twin
        (["--init-from", "resnet18_fp"], "'resnet18_fp' is not in the zoo yet: train and export it first (arbibench "
                                         "train --arch resnet18 --method fp --recipe paper --export)"),
    ],
)
def test_cli_refuses_an_option_before_any_run_folder(tmp_path, data_dir, monkeypatch, options, says):
    from typer.testing import CliRunner

    from arbibench.cli import app

    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "220")  # one line
    out = tmp_path / "trainruns"
    result = CliRunner().invoke(app, ["train", "--arch", "resnet20", "--method", "bnn", *options, "--out", str(out),
                                      "--zoo-dir", str(tmp_path / "zoo")])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Invalid learning rate" not in result.output, result.output
    assert not out.exists() and not (tmp_path / "zoo").exists()  # once, an empty trainruns/<arch>_bnn/ stayed


@pytest.mark.parametrize("field,value", [("arch", "nosuch"), ("lr", -1.0), ("lr", float("inf")),
                                         ("weight_decay", -1e-4), ("warmup_fraction", 1.0), ("optimizer", "rmsprop"),
                                         ("init_from", "nosuch")])
def test_a_recipe_that_cannot_train_is_refused_before_its_folder(tmp_path, data_dir, field, value):
    bad = Recipe(method="fp", epochs=1, batch_size=64, train_examples=64, **{field: value})
    with pytest.raises((ValueError, FileNotFoundError), match=field if field != "init_from" else "nosuch"):
        train(bad, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("minutes", ["-1", "0", "nan"])
def test_cli_time_limit_error_is_in_minutes(tmp_path, minutes):
    from typer.testing import CliRunner

    from arbibench.cli import app

    result = CliRunner().invoke(app, ["train", "--method", "bnn", "--time-limit", minutes, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"--time-limit is in minutes and must be positive, got {minutes}" in result.output
    assert "seconds" not in result.output and not any(tmp_path.iterdir())
