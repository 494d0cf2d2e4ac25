"""The shipped checkpoints: verified loading, cards that tell the truth, clear errors."""

import shutil

import pytest
from safetensors.torch import load_file, save_file

from arbibench.data import load_cifar10
from arbibench.evaluation.inputs import clean_accuracy
from arbibench.models.zoo import CHECKPOINT_DIR, ZOO, ChecksumError, load_card, load_model, sha256_file

SHIPPED = sorted(ZOO)


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_matches_registry_and_card(name):
    card = load_card(name)
    digest = sha256_file(CHECKPOINT_DIR / ZOO[name].filename)
    assert digest == ZOO[name].sha256 == card["sha256"]
    assert card["method"] == ZOO[name].method and card["architecture"] == ZOO[name].arch
    for key in ("clean_acc", "clean_acc_first500", "params", "train_time_s"):
        assert isinstance(card[key], (int, float)), key


@pytest.mark.parametrize("name", SHIPPED)
def test_clean_accuracy_on_first_500_matches_card(name, data_dir):
    x, y, _ = load_cifar10(500, data_dir=data_dir)
    acc = clean_accuracy(load_model(name), x, y)
    assert acc == pytest.approx(load_card(name)["clean_acc_first500"], abs=0.02)


def test_corrupted_checkpoint_is_refused(tmp_path):
    name = "resnet20_fp"
    tensors = load_file(str(CHECKPOINT_DIR / ZOO[name].filename))
    tensors["fc.bias"] = tensors["fc.bias"] + 1.0
    save_file(tensors, str(tmp_path / ZOO[name].filename))
    with pytest.raises(ChecksumError, match="sha256"):
        load_model(name, model_dir=tmp_path)


def test_missing_checkpoint_and_unknown_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="arbibench train"):
        load_model("resnet20_bnn", model_dir=tmp_path)
    with pytest.raises(ValueError, match="resnet20_fp"):
        load_model("resnet20_nope")
    with pytest.raises(ValueError, match="known models"):
        load_model("resnet20_fp", dataset="imagenet")


def test_copy_of_the_real_checkpoint_loads_from_another_folder(tmp_path):
    shutil.copy(CHECKPOINT_DIR / "resnet20_bnn.safetensors", tmp_path)
    model = load_model("resnet20_bnn", model_dir=tmp_path)
    assert not model.training
