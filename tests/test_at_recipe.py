"""Fast adversarial training: the FGSM-with-random-start example, the recipe, and the catastrophic-overfitting stop."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import arbibench.models.zoo as zoo_module
import arbibench.train.checkpoints as checkpoints_module
import arbibench.train.loop as loop_module
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.zoo import ZOO, ChecksumError, fp_twin_name, load_model
from arbibench.train import at_recipe, default_recipe, fgsm_random_start, train
from arbibench.train.export import export_checkpoint


def test_fgsm_random_start_stays_in_the_ball_and_raises_the_loss(data_dir):
    x, y, _ = load_cifar10(64, data_dir=data_dir)
    model = load_model("resnet20_fp").train()
    eps = 8 / 255
    gen = torch.Generator().manual_seed(0)
    x_adv = fgsm_random_start(model, x, y, eps, 10 / 255, gen)
    assert (x_adv - x).abs().max() <= eps + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert not x_adv.requires_grad and all(p.grad is None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        clean, adv = F.cross_entropy(model(x), y), F.cross_entropy(model(x_adv), y)
    assert adv > clean + 1.0  # a real attack: an undefended model loses most of its accuracy at 8/255
    # the draw is the generator's: same seed, same example
    again = fgsm_random_start(model.train(), x, y, eps, 10 / 255, torch.Generator().manual_seed(0))
    assert torch.equal(x_adv, again)


def test_at_recipes_and_twins(tmp_path):
    fp = default_recipe("fp", kind="at")
    assert (fp.adversarial, fp.init_from, fp.teacher) == ("fgsm_rs", "resnet20_fp", None)
    assert fp.adv_eps == pytest.approx(8 / 255) and fp.adv_step == pytest.approx(10 / 255)
    assert fp.robust_check_images > 0
    bnn = at_recipe("bireal")
    assert (bnn.init_from, bnn.teacher) == ("resnet20_fp_at", "resnet20_fp_at")
    assert 0 < bnn.step1_epochs < bnn.epochs and bnn.adversarial == "fgsm_rs"
    with pytest.raises(ValueError, match="unknown adversarial"):
        train(replace(fp, adversarial="pgd_free"), tmp_path / "run")
    # a standard model's FP twin is the standard FP model; an adversarially trained one's, the adversarial FP model
    assert fp_twin_name(ZOO["resnet20_bireal"]) == "resnet20_fp"
    for name, entry in ZOO.items():
        if entry.training == "adversarial" and entry.method != "fp":
            assert fp_twin_name(entry) == "resnet20_fp_at", name


def test_catastrophic_overfitting_stops_with_the_best_epoch(tmp_path, data_dir, monkeypatch):
    """A collapse of PGD accuracy (simulated here: the check's values are fed in) stops the run, keeps the best
    epoch's weights and is written into the summary and the card; rerunning the finished run trains nothing."""
    recipe = replace(
        at_recipe("fp"), epochs=3, train_examples=128, batch_size=64, robust_check_images=32
    )
    values = iter([0.30, 0.40, 0.10])
    monkeypatch.setattr(loop_module, "robust_check", lambda *a, **k: next(values))
    out = tmp_path / "resnet20_fp_at"
    summary = train(recipe, out, data_dir, log=lambda m: None, eval_examples=100)
    check = summary["robust_check"]
    assert check["pgd10_acc_per_epoch"] == [0.30, 0.40, 0.10]
    assert check["catastrophic_overfitting"] and check["best_epoch"] == 2
    best = load_file(str(out / "best.safetensors"))
    final = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(best[k], final[k]) for k in best)
    card = json.loads(export_checkpoint(out, "resnet20_fp_at", tmp_path / "zoo").read_text())
    assert card["training"] == "adversarial" and card["threat_model"]["eps"] == pytest.approx(8 / 255)
    assert card["robust_check"]["catastrophic_overfitting"]
    # resuming a run that stopped early trains no further epoch
    monkeypatch.setattr(loop_module, "robust_check", lambda *a, **k: pytest.fail("trained again"))
    again = train(recipe, out, data_dir, log=lambda m: None, eval_examples=100)
    assert again["history"] == summary["history"]


def test_a_drop_short_of_collapse_keeps_training(tmp_path, data_dir, monkeypatch):
    recipe = replace(
        at_recipe("fp"), epochs=2, train_examples=64, batch_size=64, robust_check_images=32
    )
    values = iter([0.40, 0.25])
    monkeypatch.setattr(loop_module, "robust_check", lambda *a, **k: next(values))
    summary = train(recipe, tmp_path / "run", data_dir, log=lambda m: None, eval_examples=100)
    assert not summary["robust_check"]["catastrophic_overfitting"] and len(summary["history"]) == 2


def test_init_from_an_exported_but_unregistered_checkpoint(tmp_path, monkeypatch):
    # make zoo trains the AT BNNs from resnet20_fp_at right after exporting it, before its sha256 is registered:
    # the exported file is accepted only when it matches the sha256 its card records.
    src = ZOO["resnet20_fp"]
    shutil.copy(checkpoints_module.verified_checkpoint(src), tmp_path / "resnet20_new.safetensors")
    digest = checkpoints_module.sha256_file(tmp_path / "resnet20_new.safetensors")
    (tmp_path / "resnet20_new.json").write_text(json.dumps({"sha256": digest}))
    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_DIR", tmp_path)
    assert "resnet20_new" not in ZOO
    assert checkpoints_module.init_checkpoint("resnet20_new") == tmp_path / "resnet20_new.safetensors"
    (tmp_path / "resnet20_new.json").write_text(json.dumps({"sha256": "0" * 64}))
    with pytest.raises(ChecksumError, match="export it again"):
        checkpoints_module.init_checkpoint("resnet20_new")
    with pytest.raises(FileNotFoundError, match="neither a zoo model name nor an existing checkpoint file"):
        checkpoints_module.init_checkpoint("resnet20_never_exported")
    with pytest.raises(FileNotFoundError, match=r"'resnet18_fp_at' is not in the zoo yet: .* --arch resnet18 "
                                                r"--method fp --recipe at --export"):
        checkpoints_module.init_checkpoint("resnet18_fp_at")


def test_init_from_a_zoo_model_reexported_before_its_new_sha256_is_pinned(tmp_path, monkeypatch):
    # make zoo continues resnet20_reactnet right after `arbibench recalibrate --export` replaced it: the new file is
    # accepted when its card matches it and names the pinned version as the one it replaced; never otherwise.
    shipped = checkpoints_module.verified_checkpoint(ZOO["resnet20_fp"])
    new = tmp_path / "resnet20_fp.safetensors"
    tensors = load_file(str(shipped))
    tensors["bn1.running_mean"] = tensors["bn1.running_mean"] + 1.0  # new statistics, new sha256
    save_file(tensors, str(new))
    digest = checkpoints_module.sha256_file(new)
    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_DIR", tmp_path)
    monkeypatch.setattr(zoo_module, "CHECKPOINT_DIR", tmp_path)
    card = tmp_path / "resnet20_fp.json"
    card.write_text(json.dumps({"sha256": digest, "previous_versions": [{"sha256": "f" * 64}]}))
    with pytest.raises(ChecksumError, match="zoo registry expects"):  # the pinned version is not the one replaced
        checkpoints_module.init_checkpoint("resnet20_fp")
    card.write_text(json.dumps({"sha256": digest, "previous_versions": [{"sha256": ZOO["resnet20_fp"].sha256}]}))
    assert checkpoints_module.init_checkpoint("resnet20_fp") == new
    card.write_text(json.dumps({"sha256": "0" * 64, "previous_versions": [{"sha256": ZOO["resnet20_fp"].sha256}]}))
    with pytest.raises(ChecksumError, match="export it again"):  # the card must match the file
        checkpoints_module.init_checkpoint("resnet20_fp")
