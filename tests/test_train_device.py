"""The training path built for a GPU, tested where it runs the same code: on the CPU.

Resident data, on-device augmentation, sync-free steps, bf16 autocast, time-limited pieces that resume to the
weights of an uninterrupted run, the papers' recipes and several models side by side. No GPU is needed: a device
here is whatever torch gives, and the GPU-only choices (fused optimisers, CUDA graphs) are taken by device type.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.models.architectures import build_model
from arbibench.nn.quantizers import EDESign, set_training_progress
from arbibench.train import Recipe, default_recipe, learning_rate, train
from arbibench.train.augmentation import apply_augmentation, augment, draw_augmentation
from arbibench.train.execution import Execution, TimeLimitReached
from arbibench.train.loop import make_optimizer, schedule_ede
from arbibench.train.side_by_side import parse_members

runner = CliRunner()
HARNESS = Path(__file__).with_name("cli_at_test_size.py")


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_augmentation_is_the_padded_crop_and_flip_it_draws():
    # the vectorised crop (no boolean-mask indexing) against the definition, image by image
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(1, 256, (16, 3, 32, 32), generator=gen, dtype=torch.int64).to(torch.uint8)
    oy, ox, flip = draw_augmentation(16, torch.Generator().manual_seed(7))
    out = apply_augmentation(x, oy, ox, flip)
    for i in range(16):
        padded = F.pad(x[i], (4, 4, 4, 4))
        want = padded[:, oy[i] : oy[i] + 32, ox[i] : ox[i] + 32]
        assert torch.equal(out[i], want.flip(-1) if flip[i] else want)
    # augment() draws the same stream as before: offsets, offsets, flips
    assert torch.equal(augment(x, torch.Generator().manual_seed(7)), out)
    assert 0 < int(flip.sum()) < 16 and int(oy.max()) <= 8


def test_time_limited_pieces_resume_to_the_uninterrupted_weights(tmp_path, data_dir):
    recipe = Recipe(method="bnn", epochs=3, batch_size=64, train_examples=128, optimizer="adam", lr=1e-3,
                    val_examples=100)
    full = train(recipe, tmp_path / "full", data_dir, log=lambda m: None, eval_examples=100)
    pieces = 0
    while True:  # a limit shorter than any epoch: every call trains one epoch, then stops with a checkpoint
        try:
            cut = train(recipe, tmp_path / "cut", data_dir, log=lambda m: None, eval_examples=100,
                        execution=Execution(time_limit_s=1e-3))
            break
        except TimeLimitReached as stop:
            pieces += 1
            assert stop.epochs_done == pieces and stop.epochs == 3
            assert json.loads((tmp_path / "cut" / "state.json").read_text())["epoch"] == pieces - 1
    assert pieces == 2  # epochs 1 and 2 stopped; the last one finishes the run
    assert _digest(tmp_path / "full" / "model.safetensors") == _digest(tmp_path / "cut" / "model.safetensors")
    assert [h["val_acc"] for h in cut["history"]] == [h["val_acc"] for h in full["history"]]
    assert cut["clean_acc"] == full["clean_acc"]


def test_bf16_autocast_trains_and_ships_float32_measured_in_float32(tmp_path, data_dir):
    recipe = Recipe(method="reactnet", epochs=1, batch_size=64, train_examples=128, optimizer="adam", lr=1e-3)
    plain = train(recipe, tmp_path / "plain", data_dir, log=lambda m: None, eval_examples=100)
    bf16 = train(recipe, tmp_path / "bf16", data_dir, log=lambda m: None, eval_examples=100,
                 execution=Execution(autocast="bf16"))
    record = bf16["epoch_seconds"][0]
    assert record["autocast"] == "bf16" and record["device"] == "cpu" and plain["epoch_seconds"][0]["autocast"] is None
    weights = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert all(t.dtype in (torch.float32, torch.int64) for t in weights.values())
    # the same step in lower precision: a close loss, not the same one
    loss_plain, loss_bf16 = plain["history"][0]["train_loss"], bf16["history"][0]["train_loss"]
    assert loss_bf16 != loss_plain and abs(loss_bf16 - loss_plain) < 0.1 * loss_plain
    # the shipped accuracy is the float32 model's on the CPU: measured again, it is the same figure
    model = build_model("resnet20", "reactnet")
    model.load_state_dict(weights)
    from arbibench.data.cifar10 import read_cifar10_arrays
    from arbibench.train.accuracy import top1_accuracy

    x, y = read_cifar10_arrays("test", data_dir)
    assert top1_accuracy(model, x[:100], y[:100]) == bf16["clean_acc"]


def test_a_run_resumed_under_other_flags_goes_on_and_records_how_each_epoch_ran(tmp_path, data_dir):
    # benchmarks/bf16_training.py's "bf16_then_fp32" arm: the first epoch in bf16, the last resumed in float32
    recipe = Recipe(method="xnor", epochs=2, batch_size=64, train_examples=128, optimizer="adam", lr=1e-3,
                    val_examples=100)
    bf16 = train(recipe, tmp_path / "bf16", data_dir, log=lambda m: None, eval_examples=100,
                 execution=Execution(autocast="bf16"))
    with pytest.raises(TimeLimitReached):
        train(recipe, tmp_path / "mixed", data_dir, log=lambda m: None, eval_examples=100,
              execution=Execution(autocast="bf16", time_limit_s=1e-3))
    mixed = train(recipe, tmp_path / "mixed", data_dir, log=lambda m: None, eval_examples=100)
    assert [e["autocast"] for e in mixed["epoch_seconds"]] == ["bf16", None]
    assert mixed["history"][0] == bf16["history"][0]  # the bf16 epoch is the bf16 run's own
    assert mixed["history"][1]["train_loss"] != bf16["history"][1]["train_loss"]  # the float32 one is not


def test_execution_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="unknown autocast 'fp8'"):
        Execution(autocast="fp8")
    with pytest.raises(ValueError, match="unknown compile mode"):
        Execution(compile_mode="fastest")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        Execution(device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU.*--device cpu"):
            Execution(device="cuda")


def test_train_cli_device_and_autocast_errors_are_one_line(tmp_path):
    for args, message in ((["--device", "tpu"], "unknown device 'tpu'"), (["--autocast", "fp16"], "unknown autocast")):
        result = runner.invoke(app, ["train", "--method", "bnn", "--out", str(tmp_path), *args])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("method", ["fp", "bnn", "xnor", "dorefa", "xnorpp", "bireal", "irnet", "reactnet"])
def test_every_paper_recipe_is_full_length_held_out_and_cited(method):
    r = default_recipe(method, kind="paper")
    assert r.epochs >= 200 and r.batch_size == 128 and r.val_examples == 5000 and r.patience == 0
    assert r.sources and all(isinstance(v, str) and v for v in r.sources.values())
    assert any("held-out" in k for k in r.sources)


def test_paper_recipes_follow_their_sources():
    irnet = default_recipe("irnet", kind="paper")  # htqin/IR-Net ResNet-20 1w1a trainer
    assert (irnet.optimizer, irnet.nesterov, irnet.lr, irnet.weight_decay, irnet.schedule, irnet.epochs) == (
        "sgd", False, 0.1, 1e-4, "cosine", 400)
    assert irnet.init_from is None and irnet.teacher is None and irnet.ede_t_min == 1e-3
    react = default_recipe("reactnet", kind="paper")  # two steps, Adam, linear decay, conv-only decay in step 1
    assert (react.step1_epochs, react.epochs, react.schedule, react.weight_decay_scope) == (128, 256, "linear", "conv")
    assert react.teacher == "resnet20_fp" and react.ce_weight == 0.0 and react.step2_weight_decay == 0.0
    bnn = default_recipe("bnn", kind="paper")  # no CIFAR-10 recipe in the paper: BiBench's, from the FP twin
    assert bnn.init_from == "resnet20_fp" and bnn.optimizer == "adam" and "BiBench" in " ".join(bnn.sources.values())


def test_recipes_on_another_backbone_start_from_and_distil_that_backbones_twin():
    for kind in ("paper", "kd", "long", "finetune"):
        r = default_recipe("reactnet", kind=kind, arch="resnet18")
        assert r.arch == "resnet18"
        assert {r.init_from, r.teacher} - {None} <= {"resnet18_fp", "resnet18_reactnet"}, (kind, r)
    assert default_recipe("bnn", kind="paper", arch="resnet18").init_from == "resnet18_fp"


def test_linear_schedule_decays_to_zero():
    r = Recipe(lr=0.4, schedule="linear")
    assert learning_rate(r, 0, 100) == 0.4 and learning_rate(r, 50, 100) == pytest.approx(0.2)
    assert learning_rate(r, 100, 100) == 0.0


def test_reactnet_weight_decay_is_on_kernels_in_step_1_and_off_in_step_2():
    recipe = default_recipe("reactnet", kind="paper")
    model = build_model("resnet20", "reactnet")
    step1 = make_optimizer(recipe, model, 0)
    decayed = [p for g in step1.param_groups if g["weight_decay"] > 0 for p in g["params"]]
    assert decayed and all(p.dim() == 4 for p in decayed)
    assert {g["weight_decay"] for g in step1.param_groups} == {1e-5, 0.0}
    step2 = make_optimizer(recipe, model, recipe.step1_epochs)
    assert {g["weight_decay"] for g in step2.param_groups} == {0.0}
    irnet = make_optimizer(default_recipe("irnet", kind="paper"), build_model("resnet20", "irnet"), 0)
    assert len(irnet.param_groups) == 1 and irnet.param_groups[0]["weight_decay"] == 1e-4  # every parameter
    assert irnet.param_groups[0]["nesterov"] is False


def test_ede_starts_where_the_recipe_says_and_ends_at_the_deployed_temperature():
    model = build_model("resnet20", "irnet")
    schedule_ede(model, default_recipe("irnet", kind="paper"))
    ede = [m for m in model.modules() if isinstance(m, EDESign)]
    assert ede
    set_training_progress(model, 0.0)
    assert all(float(m.temperature) == pytest.approx(1e-3) for m in ede)
    set_training_progress(model, 1.0)
    assert all(float(m.temperature) == pytest.approx(10.0) for m in ede)
    fresh = [m for m in build_model("resnet20", "irnet").modules() if isinstance(m, EDESign)]
    fresh[0].set_progress(0.0)
    assert float(fresh[0].temperature) == pytest.approx(0.1)  # the other recipes keep the quantizer's default


def test_side_by_side_names_are_checked_before_anything_starts(tmp_path):
    members = parse_members("resnet20_fp, resnet20_bnn", tmp_path, {"resnet20"}, {"fp", "bnn"})
    assert [(m.arch, m.method, m.run_dir.name) for m in members] == [("resnet20", "fp", "resnet20_fp"),
                                                                       ("resnet20", "bnn", "resnet20_bnn")]
    for names, message in ((",", "names no model"), ("resnet20_fp,resnet20_fp", "twice"),
                           ("resnet99_bnn", "not <architecture>_<method>")):
        with pytest.raises(ValueError, match=message):
            parse_members(names, tmp_path, {"resnet20"}, {"fp", "bnn"})


def test_train_models_side_by_side_runs_each_as_it_would_run_alone(tmp_path, data_dir):
    # two real training processes (at test size) started by one command; each writes what a lone run writes
    cmd = [sys.executable, str(HARNESS), "train", "--models", "resnet20_bnn,resnet20_xnor", "--epochs", "1",
           "--out", str(tmp_path), "--data-dir", str(data_dir)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("resnet20_bnn", "resnet20_xnor"):
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["recipe"]["method"] == name.split("_")[1] and summary["recipe"]["epochs"] == 1
        assert "clean accuracy" in (tmp_path / f"{name}.log").read_text()
        assert f"{name}: finished" in result.stdout


def test_a_fresh_run_replaces_a_shipped_model_only_when_better_on_held_out_images(tmp_path, data_dir, monkeypatch):
    # a one-epoch run on 64 images cannot beat the shipped resnet20_bnn on the same 500 held-out training images:
    # export keeps the shipped files; --replace ships it and the card records both figures
    import functools
    import shutil

    import arbibench.train as training
    from arbibench.models.zoo import CHECKPOINT_DIR
    from tests.cli_at_test_size import EVAL_EXAMPLES, tiny_recipe

    # the real `train` command in this process, shrunk as cli_at_test_size.py shrinks it (no process start-ups)
    monkeypatch.setattr(training, "default_recipe", tiny_recipe)
    monkeypatch.setattr(training, "train", functools.partial(training.train, eval_examples=EVAL_EXAMPLES))
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for suffix in (".safetensors", ".json"):
        shutil.copy(CHECKPOINT_DIR / f"resnet20_bnn{suffix}", zoo)
    before = _digest(zoo / "resnet20_bnn.safetensors")
    cmd = ["train", "--method", "bnn", "--epochs", "1", "--val-examples", "500",
           "--out", str(tmp_path / "runs"), "--data-dir", str(data_dir), "--export", "--zoo-dir", str(zoo)]
    kept = runner.invoke(app, cmd)
    assert kept.exit_code == 0, kept.output
    assert "kept the zoo's resnet20_bnn" in kept.output and "--replace ships the run anyway" in kept.output
    assert _digest(zoo / "resnet20_bnn.safetensors") == before
    # the run that did not ship is in the shipped card, compared on the same 500 held-out images
    (attempt,) = json.loads((zoo / "resnet20_bnn.json").read_text())["attempts"]
    assert attempt["compared_with"] == before and attempt["val_examples"] == 500
    assert attempt["val_acc"] < attempt["shipped_val_acc"] and len(attempt["history"]) == 1
    forced = runner.invoke(app, [*cmd, "--replace"])
    assert forced.exit_code == 0, forced.output
    card = json.loads((zoo / "resnet20_bnn.json").read_text())
    assert card["attempts"] == [attempt]  # kept as history; it was compared with the version now replaced
    shipped = card["validation"]["shipped"]
    assert shipped["forced"] is True and shipped["trained_on_heldout"] is True
    assert shipped["val_acc"] > card["validation"]["val_acc"] and shipped["sha256"] == card["previous_versions"][-1][
        "sha256"]
    assert card["published"]["goal"] == 0.80 and card["published"]["acc"] is None
