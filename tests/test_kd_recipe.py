"""The few-epoch distillation recipe: two steps, the FP twin as teacher, clipping, BatchNorm re-estimation, export."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from arbibench.data.cifar10 import load_cifar10
from arbibench.machine import cpu_model
from arbibench.models.architectures import build_model
from arbibench.models.zoo import ZOO, verified_checkpoint
from arbibench.nn import BinaryConv2d, LearnedScaleSign
from arbibench.train import (
    augment,
    default_recipe,
    distillation_loss,
    kd_recipe,
    recalibrate_batchnorm,
    recalibrate_checkpoint,
    recalibration_images,
    stage_method,
    train,
)
from arbibench.train.export import export_checkpoint


def _tiny(method: str, **changes):
    recipe = kd_recipe(method)
    recipe.epochs, recipe.step1_epochs, recipe.batch_size, recipe.train_examples = 2, 1, 64, 192
    recipe.bn_recalibration_batches = 2
    for k, v in changes.items():
        setattr(recipe, k, v)
    return recipe


def test_distillation_loss_is_cross_entropy_to_the_teacher_distribution():
    torch.manual_seed(0)
    teacher, student = torch.randn(4, 10), torch.randn(4, 10, requires_grad=True)
    p = F.softmax(teacher, 1)
    expected = -(p * F.log_softmax(student, 1)).sum(1).mean()
    assert torch.allclose(distillation_loss(student, teacher), expected)
    # its gradient is (softmax(student) - softmax(teacher)) / batch: zero where the student matches the teacher
    (g,) = torch.autograd.grad(distillation_loss(student, teacher), student)
    assert torch.allclose(g, (F.softmax(student, 1) - p).detach() / 4, atol=1e-7)
    same = teacher.clone().requires_grad_(True)
    (g0,) = torch.autograd.grad(distillation_loss(same, teacher), same)
    assert g0.abs().max() < 1e-7


def test_kd_recipe_fields_and_errors():
    r = default_recipe("bireal", kind="kd")
    assert (r.teacher, r.init_from, r.optimizer, r.weight_decay) == ("resnet20_fp", "resnet20_fp", "adam", 0.0)
    assert 0 < r.step1_epochs < r.epochs and r.clip_latent_weights
    assert r.bn_recalibration_batches > 0 and r.bn_recalibration_augment  # on augmented images (see kd_recipe)
    assert not default_recipe("irnet", kind="kd").clip_latent_weights  # Libra-PB standardises its weights
    assert default_recipe("reactnet", kind="kd", paper=True).step1_epochs == default_recipe(
        "reactnet", kind="kd", paper=True
    ).epochs // 2
    with pytest.raises(ValueError, match="full precision"):
        default_recipe("fp", kind="kd")
    with pytest.raises(ValueError, match="unknown recipe"):
        default_recipe("bnn", kind="distill")


def test_step_one_keeps_real_weights_and_step_two_binarizes_them():
    r = _tiny("xnor")
    assert stage_method(r, 0).kernel_quantizer is None and stage_method(r, 0).input_quantizer == "ste_sign"
    assert stage_method(r, 1).kernel_quantizer == "channel_scaled_sign"


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _StopError(Exception):
    pass


@pytest.fixture(scope="module")
def xnorpp_run(tmp_path_factory, data_dir):
    """One uninterrupted two-step xnorpp run, shared: the reference of the resume test, the start of a continuation."""
    folder = tmp_path_factory.mktemp("xnorpp") / "full"
    return folder, train(_tiny("xnorpp"), folder, data_dir, log=lambda m: None, eval_examples=200)


def test_two_step_run_resumes_across_the_step_boundary_to_identical_weights(tmp_path, data_dir, xnorpp_run):
    # xnorpp: step 2 adds learned scales that step 1 does not have, initialised from the step-1 weights
    recipe = _tiny("xnorpp")
    full_dir, full = xnorpp_run

    def stop_after_step_one(msg):
        if msg.startswith("epoch 1:"):
            raise _StopError

    with pytest.raises(_StopError):
        train(recipe, tmp_path / "resumed", data_dir, log=stop_after_step_one, eval_examples=200)
    step1 = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert not any(k.endswith("kernel_quantizer.alpha") for k in step1)  # step 1: no binary kernels yet
    resumed = train(recipe, tmp_path / "resumed", data_dir, log=lambda m: None, eval_examples=200)
    assert _digest(full_dir / "model.safetensors") == _digest(tmp_path / "resumed" / "model.safetensors")
    assert resumed["clean_acc"] == full["clean_acc"]
    final = load_file(str(full_dir / "model.safetensors"))
    assert any(k.endswith("kernel_quantizer.alpha") for k in final)
    assert "clean_acc_before_bn_recalibration" in full


def test_clipped_ste_kernels_stay_in_the_unit_interval(tmp_path, data_dir):
    recipe = _tiny("bnn", lr=0.5)  # a step size that would throw unclipped weights far out
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    model = build_model("resnet20", "bnn")
    latent = [n + ".weight" for n, m in model.named_modules() if isinstance(m, BinaryConv2d)]
    assert latent and max(state[k].abs().max().item() for k in latent) <= 1.0
    assert max(state[k].abs().max().item() for k in ("fc.weight", "conv1.weight")) > 0  # others untouched
    optimizer_meta = json.loads((tmp_path / "run" / "state.json").read_text())["optimizer"]
    assert [g["weight_decay"] for g in optimizer_meta["param_groups"]] == [recipe.weight_decay, 0.0]


def test_learned_scales_start_at_the_mean_absolute_weight():
    from arbibench.train import init_learned_scales

    torch.manual_seed(0)
    model = build_model("resnet20", "xnorpp")
    init_learned_scales(model)
    layers = [m for m in model.modules() if isinstance(getattr(m, "kernel_quantizer", None), LearnedScaleSign)]
    assert layers
    for m in layers:
        expected = m.weight.abs().mean(dim=(1, 2, 3))
        assert torch.allclose(m.kernel_quantizer.alpha.flatten(), expected)


def test_batchnorm_recalibration_gives_the_plain_batch_statistics(data_dir):
    x, _, _ = load_cifar10(96, data_dir=data_dir)
    images = (x * 255).round().to(torch.uint8)
    torch.manual_seed(0)
    model = build_model("resnet20", "bnn")
    model.bn1.running_mean.fill_(5.0)  # stale statistics that the re-estimation must replace
    momentum = model.bn1.momentum
    recalibrate_batchnorm(model, images, batch_size=32)
    with torch.no_grad():
        pre = model.conv1(model.normalize(images.float() / 255))
    assert torch.allclose(model.bn1.running_mean, pre.mean(dim=(0, 2, 3)), atol=1e-5)
    assert model.bn1.momentum == momentum and not model.training


def test_export_keeps_the_replaced_version_in_the_card(tmp_path, data_dir):
    recipe = _tiny("bireal", epochs=2, train_examples=64)
    train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    old = {"name": "resnet20_bireal", "dataset": "cifar10", "architecture": "resnet20", "method": "bireal",
           "checkpoint": "resnet20_bireal.safetensors", "sha256": "0" * 64, "clean_acc": 0.6258,
           "recipe": {"epochs": 6}, "history": [{"epoch": 1, "train_loss": 1.2, "train_acc": 0.55, "val_acc": 0.57}]}
    (zoo / "resnet20_bireal.json").write_text(json.dumps(old))
    card = json.loads(export_checkpoint(tmp_path / "run", "resnet20_bireal", zoo).read_text())
    assert card["recipe"]["teacher"] == "resnet20_fp"
    assert card["previous_versions"][-1]["clean_acc"] == 0.6258
    assert card["previous_versions"][-1]["sha256"] == "0" * 64
    assert card["previous_versions"][-1]["history"] == old["history"]  # the replaced run's learning curve stays
    assert [h["epoch"] for h in card["history"]] == [1, 2]
    again = json.loads(export_checkpoint(tmp_path / "run", "resnet20_bireal", zoo).read_text())
    assert again["previous_versions"] == card["previous_versions"]  # re-exporting the same weights adds nothing


def test_continuing_a_trained_bnn_loads_every_tensor_and_records_the_starting_weights(tmp_path, data_dir,
                                                                                     xnorpp_run):
    # --step1-epochs 0 --init-from <a trained BNN>: binary weights from the first epoch, learned scales included
    start = xnorpp_run[0] / "model.safetensors"
    messages: list[str] = []
    more = _tiny("xnorpp", epochs=1, step1_epochs=0, init_from=str(start))
    summary = train(more, tmp_path / "more", data_dir, log=messages.append, eval_examples=100)
    n = len(load_file(str(start)))
    assert f"initialised {n}/{n} tensors from {start}" in messages
    assert not any(m.startswith("step 2") for m in messages)  # no step boundary: binary weights throughout
    assert summary["init_sha256"] == _digest(start)
    zoo = tmp_path / "zoo"
    card = json.loads(export_checkpoint(tmp_path / "more", "resnet20_xnorpp", zoo).read_text())
    assert card["init_sha256"] == _digest(start) and card["recipe"]["step1_epochs"] == 0
    # the card names the CPU and says what each epoch cost on it
    assert card["trained_on"].startswith(cpu_model()) and re.search(r", \d+ threads?(,|$)", card["trained_on"])
    assert [e["epoch"] for e in card["epoch_seconds"]] == [1] and card["epoch_seconds"][0]["seconds"] > 0
    assert _digest(zoo / "resnet20_xnorpp.safetensors") != _digest(start)  # it trained


def test_a_negative_step_one_is_refused(tmp_path, data_dir):
    with pytest.raises(ValueError, match="step1_epochs must be 0"):
        train(_tiny("bnn", step1_epochs=-1), tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)


def test_recalibration_images_are_a_fixed_draw_with_the_training_augmentation(data_dir):
    x, _, _ = load_cifar10(300, split="train", data_dir=data_dir)
    images = (x * 255).round().to(torch.uint8)
    recipe = _tiny("bireal", bn_recalibration_batches=2, batch_size=64)
    augmented = recalibration_images(images, recipe)
    assert augmented.shape == (128, 3, 32, 32) and augmented.dtype == torch.uint8
    assert torch.equal(augmented, recalibration_images(images, recipe))  # a rerun re-estimates the same statistics
    plain = recalibration_images(images, _tiny("bireal", bn_recalibration_batches=2, batch_size=64,
                                               bn_recalibration_augment=False))
    assert not torch.equal(augmented, plain)
    # the same 128 training images, passed through the training augmentation with the draw's generator
    assert len({bytes(p.numpy()) for p in plain}) == 128  # distinct images: a draw without replacement
    gen = torch.Generator().manual_seed(recipe.seed)
    torch.randperm(len(images), generator=gen)
    assert torch.equal(augmented, augment(plain, gen))


def test_recalibrating_a_zoo_checkpoint_changes_only_its_running_statistics(tmp_path, data_dir):
    summary = recalibrate_checkpoint("resnet20_bireal", tmp_path / "run", data_dir, batches=2, log=lambda m: None,
                                     eval_examples=200)
    assert summary["recalibrated_from_sha256"] == ZOO["resnet20_bireal"].sha256
    assert summary["recipe"]["bn_recalibration_batches"] == 2 and summary["recipe"]["bn_recalibration_augment"]
    assert summary["recipe"]["teacher"] == "resnet20_fp"  # the rest of the recipe is the checkpoint's own
    assert 0 < summary["clean_acc_before_bn_recalibration"] <= 1 and 0 < summary["clean_acc"] <= 1
    shipped = load_file(str(verified_checkpoint(ZOO["resnet20_bireal"])))
    new = load_file(str(tmp_path / "run" / "model.safetensors"))
    assert new.keys() == shipped.keys()
    changed = {k for k in new if not torch.equal(new[k], shipped[k])}
    assert changed and all(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in changed)
    zoo = tmp_path / "zoo"
    card = json.loads(export_checkpoint(tmp_path / "run", "resnet20_bireal", zoo).read_text())
    assert card["recalibrated_from_sha256"] == ZOO["resnet20_bireal"].sha256
    assert card["clean_acc_before_bn_recalibration"] == summary["clean_acc_before_bn_recalibration"]


def test_recalibration_refuses_adversarially_trained_and_unknown_models(tmp_path, data_dir):
    with pytest.raises(ValueError, match="adversarially trained"):
        recalibrate_checkpoint("resnet20_fp_at", tmp_path / "run", data_dir, log=lambda m: None)
    with pytest.raises(FileNotFoundError, match="no checkpoint card"):
        recalibrate_checkpoint("resnet20_nosuch", tmp_path / "run", data_dir, log=lambda m: None)
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_a_run_saved_before_a_recipe_field_existed_resumes(tmp_path, data_dir):
    recipe = _tiny("bnn", epochs=2, step1_epochs=1, train_examples=64, bn_recalibration_batches=0,
                   bn_recalibration_augment=False)
    run = tmp_path / "run"
    train(replace(recipe, epochs=2), run, data_dir, log=lambda m: None, eval_examples=50)
    state = json.loads((run / "state.json").read_text())
    del state["recipe"]["bn_recalibration_augment"]  # as written by an older arbibench
    (run / "state.json").write_text(json.dumps(state))
    messages: list[str] = []
    train(recipe, run, data_dir, log=messages.append, eval_examples=50)
    assert any("resuming" in m for m in messages)
    with pytest.raises(ValueError, match="different recipe"):
        train(replace(recipe, bn_recalibration_augment=True), run, data_dir, log=lambda m: None, eval_examples=50)


def test_a_continuation_replaces_the_zoo_model_only_when_more_accurate(tmp_path, data_dir, monkeypatch):
    # make zoo continues resnet20_xnorpp from its shipped checkpoint; the export must never ship a worse model
    from typer.testing import CliRunner

    import arbibench.train as training
    from arbibench.cli import app

    monkeypatch.setattr(training, "default_recipe", lambda method, **_: _tiny(method))
    full_train = training.train
    monkeypatch.setattr(training, "train", lambda *a, **k: full_train(*a, **k, eval_examples=100))
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    zoo, runs = tmp_path / "zoo", tmp_path / "runs"
    zoo.mkdir()
    card = zoo / "resnet20_xnorpp.json"
    args = ["train", "--method", "xnorpp", "--recipe", "kd", "--init-from", "resnet20_xnorpp", "--step1-epochs", "0",
            "--epochs", "1", "--out", str(runs), "--export", "--zoo-dir", str(zoo)]  # fmt: skip
    shipped = {"name": "resnet20_xnorpp", "dataset": "cifar10", "architecture": "resnet20", "method": "xnorpp",
               "checkpoint": "resnet20_xnorpp.safetensors", "sha256": "0" * 64}
    card.write_text(json.dumps({**shipped, "clean_acc": 1.0}))  # nothing beats it
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "kept the zoo's resnet20_xnorpp (1.0000)" in result.output
    assert not (zoo / "resnet20_xnorpp.safetensors").exists()
    kept = json.loads(card.read_text())  # the shipped card, unchanged but for the run it records as an attempt
    assert {k: kept[k] for k in shipped} == shipped and kept["clean_acc"] == 1.0
    assert [a["compared_with"] for a in kept["attempts"]] == ["0" * 64] and "recorded the run" in result.output
    assert len(kept["attempts"][0]["history"]) == 1 and kept["attempts"][0]["recipe"]["init_from"] == "resnet20_xnorpp"
    card.write_text(json.dumps({**shipped, "clean_acc": 0.0}))  # the finished run beats it
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(card.read_text())["sha256"] == _digest(zoo / "resnet20_xnorpp.safetensors")


def test_zoo_attempt_records_a_finished_run_after_the_fact(tmp_path, data_dir):
    # a continuation that did not ship (a run from before runs recorded themselves) goes into the shipped card once
    import shutil

    from typer.testing import CliRunner

    from arbibench.cli import app
    from arbibench.models.zoo import CHECKPOINT_DIR

    recipe = _tiny("bnn", epochs=1, step1_epochs=0, train_examples=64, val_examples=100,
                   init_from="resnet20_bnn", bn_recalibration_batches=0)
    run = tmp_path / "runs" / "resnet20_bnn"
    summary = train(recipe, run, data_dir, log=lambda m: None, eval_examples=50)
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for suffix in (".safetensors", ".json"):
        shutil.copy(CHECKPOINT_DIR / f"resnet20_bnn{suffix}", zoo)
    shipped_sha = _digest(zoo / "resnet20_bnn.safetensors")
    invoke = CliRunner().invoke
    result = invoke(app, ["zoo", "attempt", str(run), "--model-dir", str(zoo)])
    assert result.exit_code == 0, result.output
    assert "recorded a 1-epoch run" in result.output
    card_text = (zoo / "resnet20_bnn.json").read_text()
    (attempt,) = json.loads(card_text)["attempts"]
    assert attempt["compared_with"] == shipped_sha and attempt["val_examples"] == 100
    assert attempt["shipped_val_acc"] == summary["validation"]["init_val_acc"]
    assert attempt["history"] == summary["history"] and attempt["clean_acc"] == summary["clean_acc"]
    again = invoke(app, ["zoo", "attempt", str(run), "--model-dir", str(zoo)])
    assert again.exit_code == 0 and "already records this run" in again.output
    assert (zoo / "resnet20_bnn.json").read_text() == card_text  # recording twice changes nothing
    for args, message in (
        ([str(run), "--name", "resnet20_xnor"], "trained resnet20_bnn, not resnet20_xnor"),
        ([str(tmp_path)], "has no summary.json"),
    ):
        refused = invoke(app, ["zoo", "attempt", *args, "--model-dir", str(zoo)])
        assert refused.exit_code == 2 and message in refused.output, refused.output
    shutil.copy(zoo / "resnet20_bnn.safetensors", run / "model.safetensors")  # the run that shipped these weights
    refused = invoke(app, ["zoo", "attempt", str(run), "--model-dir", str(zoo)])
    assert refused.exit_code == 2 and "holds the shipped weights" in refused.output
    assert (zoo / "resnet20_bnn.json").read_text() == card_text
