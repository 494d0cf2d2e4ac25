"""The model zoo: shipped checkpoints that load and tell the truth, user-supplied (ImageNet) checkpoints loaded with
the same checks, one clear error per mistake, and the ``zoo list`` table.
"""

import shutil
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from arbibench.cards import CheckpointCard
from arbibench.cli import app
from arbibench.data import load_cifar10, load_imagenet
from arbibench.evaluation.inputs import clean_accuracy
from arbibench.models.architectures import build_model
from arbibench.models.markdown import goal_status, paper_status, recipe_summary, training_time
from arbibench.models.methods import METHODS
from arbibench.models.zoo import (
    CHECKPOINT_DIR,
    ZOO,
    ChecksumError,
    load_card,
    load_model,
    sha256_file,
    zoo_rows,
)

# Every entry with a pinned sha256 whose file is in the package: checkpoints added to ZOO later join automatically.
SHIPPED = [n for n, e in ZOO.items() if e.sha256 is not None and (CHECKPOINT_DIR / e.filename).is_file()]
FIRST_CIFAR = next(n for n in SHIPPED if ZOO[n].dataset == "cifar10")
DATA_LOADERS = {
    "cifar10": lambda n, data_dir: load_cifar10(n, data_dir=data_dir),
    "imagenet": lambda n, data_dir: load_imagenet(n, data_dir / "imagenet-sample"),
}
runner = CliRunner()


def test_every_pinned_entry_ships_its_checkpoint_and_card():
    # an entry with a sha256 and no file would be skipped by the parametrised tests below: fail here instead
    for name, entry in ZOO.items():
        if entry.sha256 is not None:
            assert (CHECKPOINT_DIR / entry.filename).is_file(), f"{name}: {entry.filename} is not in {CHECKPOINT_DIR}"
            assert load_card(name).sha256 == entry.sha256, name
    assert {"resnet20_fp", "resnet20_bnn"} <= set(SHIPPED)


def test_imagenet_resnet18_is_registered_for_every_method_and_not_shipped():
    for method in METHODS:
        entry = ZOO[f"resnet18_imagenet_{method}"]
        assert (entry.arch, entry.method, entry.dataset) == ("resnet18_imagenet", method, "imagenet")
        assert entry.sha256 is None and not entry.shipped
    for name, entry in ZOO.items():  # names start with <arch>_<method>, so a name says what it loads
        assert name.startswith(f"{entry.arch}_{entry.method}") and entry.method in METHODS, name


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_matches_registry_and_card(name):
    card = load_card(name)
    digest = sha256_file(CHECKPOINT_DIR / ZOO[name].filename)
    assert digest == ZOO[name].sha256 == card.sha256
    assert card.method == ZOO[name].method and card.architecture == ZOO[name].arch
    assert card.dataset == ZOO[name].dataset
    for key in ("clean_acc", "clean_acc_first500", "params", "train_time_s"):
        assert isinstance(getattr(card, key), (int, float)), key
    model = load_model(name, dataset=ZOO[name].dataset)
    assert not model.training
    assert card.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", SHIPPED)
def test_clean_accuracy_on_first_500_matches_card(name, data_dir):
    entry = ZOO[name]
    x, y, _ = DATA_LOADERS[entry.dataset](500, data_dir)
    acc = clean_accuracy(load_model(name, dataset=entry.dataset), x, y)
    assert acc == pytest.approx(load_card(name).clean_acc_first500, abs=0.02)


# -- errors --------------------------------------------------------------------------------------------------------


def test_corrupted_checkpoint_is_refused(tmp_path):
    tensors = load_file(str(CHECKPOINT_DIR / ZOO[FIRST_CIFAR].filename))
    tensors["fc.bias"] = tensors["fc.bias"] + 1.0
    save_file(tensors, str(tmp_path / ZOO[FIRST_CIFAR].filename))
    with pytest.raises(ChecksumError, match="sha256"):
        load_model(FIRST_CIFAR, model_dir=tmp_path)


def test_missing_checkpoint_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="arbibench train --arch resnet20 --method bnn") as e:
        load_model("resnet20_bnn", model_dir=tmp_path)
    assert str(tmp_path / "resnet20_bnn.safetensors") in str(e.value)
    with pytest.raises(FileNotFoundError, match="does not ship") as e:
        load_model("resnet18_imagenet_bireal", model_dir=tmp_path, dataset="imagenet")
    assert str(tmp_path / "resnet18_imagenet_bireal.safetensors") in str(e.value)  # where to put it
    torch.save({"fc.bias": torch.zeros(3)}, tmp_path / "resnet18_imagenet_bireal.pth")
    with pytest.raises(FileNotFoundError, match=r"resnet18_imagenet_bireal\.pth.*convert to safetensors"):
        load_model("resnet18_imagenet_bireal", model_dir=tmp_path, dataset="imagenet")


def test_missing_imagenet_weights_point_to_a_folder_of_the_users_own():
    with pytest.raises(FileNotFoundError) as e:
        load_model("resnet18_imagenet_bireal", dataset="imagenet")  # looked up in the package's folder
    message = str(e.value)
    # the weights go into the user's folder, named as the CLI and the API name it, never into the installed package
    assert "a folder of your own" in message and "--model-dir DIR" in message and "model_dir=DIR" in message
    assert "weights there" not in message and "pass model_dir= the folder" not in message


def test_unknown_name_lists_the_known_names_of_that_dataset():
    with pytest.raises(ValueError, match="known models") as e:
        load_model("resnet20_nope")
    assert "resnet20_fp" in str(e.value) and "resnet18_imagenet" not in str(e.value)
    with pytest.raises(ValueError, match="known models") as e:
        load_model("resnet20_fp", dataset="imagenet")
    assert "resnet18_imagenet_reactnet" in str(e.value) and "pass dataset='cifar10'" in str(e.value)
    with pytest.raises(ValueError, match="known models: none"):
        load_model("resnet20_fp", dataset="mnist")


def test_copy_of_the_real_checkpoint_loads_from_another_folder(tmp_path):
    shutil.copy(CHECKPOINT_DIR / "resnet20_bnn.safetensors", tmp_path)
    model = load_model("resnet20_bnn", model_dir=tmp_path)
    assert not model.training


# -- user checkpoints (ImageNet ResNet-18) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def imagenet_state():
    torch.manual_seed(0)
    model = build_model("resnet18_imagenet", "reactnet")
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def test_imagenet_user_checkpoint_round_trip(tmp_path, imagenet_state):
    save_file(imagenet_state, str(tmp_path / "resnet18_imagenet_reactnet.safetensors"))
    model = load_model("resnet18_imagenet_reactnet", model_dir=tmp_path, dataset="imagenet")
    assert not model.training
    loaded = model.state_dict()
    assert loaded.keys() == imagenet_state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in imagenet_state.items())
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64)).shape == (1, 1000)


def test_imagenet_checkpoint_of_another_architecture_is_one_clear_error(tmp_path, imagenet_state):
    path = tmp_path / "resnet18_imagenet_reactnet.safetensors"
    bad = dict(imagenet_state)
    bad["fc.weight"] = torch.zeros(10, 512)  # a 10-class head
    bad["fc.bias"] = torch.zeros(10)
    save_file(bad, str(path))
    with pytest.raises(ValueError, match=r"shape mismatch: fc\.weight \(file \(10, 512\), model \(1000, 512\)\)"):
        load_model("resnet18_imagenet_reactnet", model_dir=tmp_path, dataset="imagenet")

    # a Bi-Real file under a ReActNet name: no RSign thresholds / RPReLU shifts, same shapes elsewhere
    save_file(build_model("resnet18_imagenet", "bireal").state_dict(), str(path))
    # 67 = the stem's RPReLU (3 tensors) + 8 blocks x (2 RSign thresholds + 2 RPReLUs x 3 tensors); first 5 listed
    missing = r"missing: act1\.shift_in, act1\.shift_out, act1\.prelu\.weight, layers\.0\.conv1\.input_q.*67 in all"
    with pytest.raises(ValueError, match=missing) as e:
        load_model("resnet18_imagenet_reactnet", model_dir=tmp_path, dataset="imagenet")
    assert "unexpected" not in str(e.value)

    extra = dict(imagenet_state)
    extra["head.weight"] = torch.zeros(3)
    save_file(extra, str(path))
    with pytest.raises(ValueError, match=r"unexpected: head\.weight"):
        load_model("resnet18_imagenet_reactnet", model_dir=tmp_path, dataset="imagenet")


def test_pickle_file_is_never_unpickled(tmp_path, imagenet_state):
    torch.save(imagenet_state, tmp_path / "resnet18_imagenet_reactnet.safetensors")  # a pickle under the right name
    with pytest.raises(ValueError, match="not a safetensors file.*never pickle"):
        load_model("resnet18_imagenet_reactnet", model_dir=tmp_path, dataset="imagenet")


# -- listing -------------------------------------------------------------------------------------------------------


def test_zoo_rows_filter_and_flags(tmp_path):
    rows = {r["name"]: r for r in zoo_rows()}
    assert set(rows) == set(ZOO)
    assert rows["resnet20_bnn"]["present"] and rows["resnet20_bnn"]["shipped"]
    assert rows["resnet20_bnn"]["clean_acc"] == load_card("resnet20_bnn").clean_acc
    assert rows["resnet20_fp"]["params"] == 269_722
    assert not rows["resnet18_imagenet_fp"]["shipped"] and not rows["resnet18_imagenet_fp"]["present"]
    assert rows["resnet18_imagenet_fp"]["clean_acc"] is None
    assert {r["dataset"] for r in zoo_rows(dataset="imagenet")} == {"imagenet"}
    assert len(zoo_rows(dataset="imagenet")) == len(METHODS)
    with pytest.raises(ValueError, match="cifar10, imagenet"):
        zoo_rows(dataset="mnist")
    (tmp_path / "resnet18_imagenet_bnn.safetensors").write_bytes(b"")
    assert {r["name"]: r for r in zoo_rows(tmp_path)}["resnet18_imagenet_bnn"]["present"]


@pytest.fixture
def wide(monkeypatch):
    from arbibench.terminal import console

    monkeypatch.setenv("COLUMNS", "300")  # no truncated or wrapped cells
    monkeypatch.setattr(console, "width", 300)  # the console's width is fixed when it is created


def test_zoo_list_cli_shows_every_column_and_entry(wide):
    result = runner.invoke(app, ["zoo", "list"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "name" in line and "dataset" in line)
    for column in ("name", "dataset", "method", "backbone", "params", "clean accuracy", "goal", "checkpoint present"):
        assert column in header
    lines = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│")}
    for name in ("resnet20_bnn", "resnet20_reactnet", "resnet20_xnorpp"):  # the goal and how far each is from it
        card = load_card(name)
        goal = goal_status(name, card.clean_acc, adversarial=card.adversarial)
        assert goal in lines[name] and goal != "-"
    assert ">= 91.5%" in lines["resnet20_fp"] and ">=" not in lines["resnet20_bireal_at"]  # no goal for AT models
    for name in ZOO:
        assert name in result.output
    assert "269,722" in result.output  # params of ResNet-20
    acc = 100 * load_card("resnet20_fp").clean_acc
    assert f"{acc:.2f}%" in result.output
    imagenet_lines = [line for line in result.output.splitlines() if "resnet18_imagenet_" in line]
    assert len(imagenet_lines) == len(METHODS) and all("not shipped" in line for line in imagenet_lines)
    assert "missing" not in result.output


def test_zoo_list_cli_dataset_filter(wide, tmp_path):
    only_imagenet = runner.invoke(app, ["zoo", "list", "--dataset", "imagenet"])
    assert only_imagenet.exit_code == 0
    assert "resnet18_imagenet_bnn" in only_imagenet.output and "resnet20_fp" not in only_imagenet.output
    only_cifar = runner.invoke(app, ["zoo", "list", "--dataset", "cifar10"])
    assert "resnet20_fp" in only_cifar.output and "resnet18_imagenet" not in only_cifar.output
    # a folder without the shipped files: they show as missing; a user's ImageNet file shows as present
    (tmp_path / "resnet18_imagenet_bnn.safetensors").write_bytes(b"")
    other = runner.invoke(app, ["zoo", "list", "--model-dir", str(tmp_path)])
    assert other.exit_code == 0
    assert "missing" in other.output and "yes (user file)" in other.output
    bad = runner.invoke(app, ["zoo", "list", "--dataset", "mnist"])
    assert bad.exit_code == 2 and "unknown dataset 'mnist'" in bad.output and "Traceback" not in bad.output


ADVERSARIAL = [n for n in SHIPPED if ZOO[n].training == "adversarial"]


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarially_trained_model_resists_pgd_where_its_card_says(name, data_dir):
    # The card's robust check ran PGD-10 at Linf 8/255 on the last 500 test images after every epoch; rerun it on
    # the last 100: an undefended ResNet-20 keeps ~0% there, the shipped AT model must keep a real share.
    from arbibench.attacks import Linf, get_attack

    card = load_card(name)
    check = card.robust_check
    assert card.adversarial and check is not None and not check["catastrophic_overfitting"]
    per_epoch = check["pgd10_acc_per_epoch"]
    assert per_epoch[check["best_epoch"] - 1] == max(per_epoch)  # shipped weights: the best epoch's
    x, y, _ = load_cifar10(None, data_dir=data_dir)
    x, y = x[-100:], y[-100:]
    model = load_model(name)
    attack = get_attack("pgd", steps=10)
    x_adv = attack(model, x, y, Linf(check["eps"]), torch.Generator().manual_seed(0))
    with torch.no_grad():
        robust = float((model(x_adv).argmax(1) == y).float().mean())
    assert robust >= 0.2, f"{name}: PGD-10 leaves {robust:.0%} of the last 100 test images"
    assert abs(robust - max(per_epoch)) < 0.15  # within sampling noise of the card's 500


def test_zoo_table_has_one_row_per_shipped_card_with_its_accuracy_recipe_and_goal(tmp_path):
    out = tmp_path / "zoo.md"
    result = runner.invoke(app, ["zoo", "table", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = {line.split(" | ")[0].strip("| `"): line for line in out.read_text().splitlines()[2:]}
    assert set(rows) == {n for n in SHIPPED if ZOO[n].dataset == "cifar10"}
    for name, line in rows.items():
        card = load_card(name)
        assert f"| {100 * card.clean_acc:.2f}% |" in line
        if card.recipe.get("teacher") and not card.recipe.get("adversarial"):
            assert f"kd: {card.recipe['epochs']} epochs" in line
    fp = rows["resnet20_fp"]
    assert "epochs from scratch" in fp and "91.25% (paper)" in fp  # He et al.'s figure and the FP twin's goal
    fp_card = load_card("resnet20_fp")
    assert fp.endswith(f"| {goal_status('resnet20_fp', fp_card.clean_acc, adversarial=False)} |") and ">= 91.5%" in fp
    assert "| no CIFAR-10 figure |" in rows["resnet20_reactnet"]  # ReActNet reports ImageNet only
    assert rows["resnet20_fp_at"].endswith("| - | - |")  # adversarially trained: no paper figure, no goal
    bad = runner.invoke(app, ["zoo", "table", "--dataset", "mnist"])
    assert bad.exit_code == 2 and "unknown dataset 'mnist'" in bad.output and "cifar10" in bad.output


def test_zoo_table_goal_and_recalibration_wording():
    card = CheckpointCard(
        name="resnet20_bireal", dataset="cifar10", architecture="resnet20", method="bireal",
        checkpoint="resnet20_bireal.safetensors", sha256="0" * 64, clean_acc=0.7551,
        clean_acc_before_bn_recalibration=0.7077,
        recipe={"epochs": 12, "step1_epochs": 3, "optimizer": "adam", "lr": 1e-3, "schedule": "cosine",
                "init_from": "resnet20_fp", "teacher": "resnet20_fp", "bn_recalibration_batches": 100,
                "bn_recalibration_augment": True})
    assert recipe_summary(card) == ("kd: 12 epochs (3 + 9) from `resnet20_fp`, distilled from `resnet20_fp`, adam lr "
                                    "0.001, cosine per step, BN re-estimated on 100 augmented batches (70.77% before)")
    assert goal_status("resnet20_bireal", 0.7551, adversarial=False) == ">= 85%: 9.49 points short"
    assert goal_status("resnet20_bireal", 0.85, adversarial=False) == ">= 85%: met"
    assert goal_status("resnet20_bnn", 0.7551, adversarial=False) == ">= 80%: 4.49 points short"
    assert goal_status("resnet20_fp", 0.9, adversarial=False) == ">= 91.5%: 1.50 points short"
    assert goal_status("resnet20_fp_at", 0.7551, adversarial=False) == "-"
    assert goal_status("resnet20_bireal", 0.7551, adversarial=True) == "-"
    assert goal_status("resnet20_bireal", None, adversarial=False) == "-"
    assert paper_status("resnet20_irnet", 0.7835, adversarial=False) == "86.50% (official code), -8.15 points"
    assert paper_status("resnet20_bireal", 0.7551, adversarial=False) == "no CIFAR-10 figure"
    # a long run: how many of its epochs ran and which one the held-out images picked
    long_run = replace(card, recipe={**card.recipe, "epochs": 60, "step1_epochs": 0, "lr": 5e-4,
                                     "init_from": "resnet20_bireal", "bn_recalibration_batches": 0},
                       validation={"epochs_run": 23, "stopped_early": True, "best_epoch": 15, "examples": 5000})
    assert recipe_summary(long_run) == (
        "kd: 60 epochs from `resnet20_bireal`, distilled from `resnet20_fp`, binary weights throughout, adam lr "
        "0.0005, cosine; 23 of 60 epochs run (stopped early), epoch 15 picked on 5,000 held-out training images")


def test_float_models_load_channels_last_on_cpu_and_predict_as_in_nchw(data_dir):
    """The faster layout must keep what the protocol measures: the same predictions, logits within round-off; a BNN
    (whose signs round-off can flip) stays NCHW unless asked."""
    x, y, _ = load_cifar10(500, data_dir=data_dir)
    fast, plain = load_model("resnet20_fp_at"), load_model("resnet20_fp_at", channels_last=False)
    assert fast.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert not plain.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        a, b = fast(x), plain(x)
    assert (a.argmax(1) == b.argmax(1)).all()
    assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())
    # gradients for NCHW inputs agree too (attacks step along their signs)
    xa, xb = x[:50].clone().requires_grad_(True), x[:50].clone().requires_grad_(True)
    ga, = torch.autograd.grad(torch.nn.functional.cross_entropy(fast(xa), y[:50]), xa)
    gb, = torch.autograd.grad(torch.nn.functional.cross_entropy(plain(xb), y[:50]), xb)
    assert torch.allclose(ga, gb, atol=1e-6)
    bnn = load_model("resnet20_bireal")
    assert not bnn.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert load_model("resnet20_bireal", channels_last=True).conv1.weight.is_contiguous(
        memory_format=torch.channels_last)


def test_training_time_never_counts_queue_pauses():
    """Cards whose epochs left the stopped time out give their total; earlier queue cards (wall time, pauses in)
    their median epoch; cards without a per-epoch record their wall time."""
    card = CheckpointCard(name="resnet20_fp", dataset="cifar10", architecture="resnet20", method="fp",
                          checkpoint="resnet20_fp.safetensors", sha256="0" * 64, clean_acc=0.9)
    clean = tuple({"epoch": i, "seconds": 120.0, "stopped_seconds": 0.0} for i in range(1, 11))
    assert training_time(replace(card, epoch_seconds=clean, train_time_s=1200.0)) == "20 min"
    paused = tuple({"epoch": i, "seconds": 120.0} for i in range(1, 11)) + ({"epoch": 11, "seconds": 1500.0},)
    assert training_time(replace(card, epoch_seconds=paused, train_time_s=2700.0)) == "120 s an epoch (median)"
    resumed = (*paused, {"epoch": 12, "seconds": 100.0, "stopped_seconds": 900.0})  # old and new records mixed
    assert training_time(replace(card, epoch_seconds=resumed)) == "120 s an epoch (median)"
    assert training_time(replace(card, train_time_s=5640.0)) == "94 min"
    assert training_time(card) == "-"
